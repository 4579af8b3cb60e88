// The /connect page: list platforms, make a one-time code, watch for the new connection, disconnect.
// Plain JavaScript, no build step. All data is rendered with textContent (never innerHTML).
(() => {
  "use strict";

  const mode = document.body.dataset.authMode || "none";
  const TOKEN_KEY = "switchboard.token";
  const POLL_MS = 3000;
  const $ = (id) => document.getElementById(id);

  let current = null; // {provider, title, code, expiresAt, knownIds}
  let countdownTimer = null;
  let pollTimer = null;
  let lastConnectionIds = new Set();
  let titles = {};
  let lastProvidersJson = "";
  let lastConnectionsJson = "";

  const { SignInNeeded, el, setStatus } = window.switchboardPage;
  // Only 401 means "sign in again" here: every signed-in person may use this page.
  const session = window.switchboardPage.client(mode, TOKEN_KEY, [401]);
  const { api, token } = session;

  function showSignIn(message) {
    stopPolling();
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
    $("token-input").focus();
  }

  function showApp() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = mode !== "jwt";
  }

  function handle(error) {
    if (error instanceof SignInNeeded) {
      showSignIn(error.message);
    } else {
      setStatus(error.message || String(error), "error");
    }
  }

  // --- providers -----------------------------------------------------------------------------------
  function renderProviders(providers) {
    // A person sees only the platforms they can connect here: a platform that is off (or, like GitHub,
    // connected by an operator) needs an operator, not them, so it is not offered at all.
    const list = $("providers");
    list.replaceChildren();
    const offered = providers.filter((p) => p.enabled && p.connectable);
    for (const p of offered) {
      titles[p.name] = p.title;
      const badge = el("span", {
        className: "badge" + (p.connected ? " on" : ""),
        textContent: p.connected ? "connected" : "not connected",
      });
      const label = el("span", { className: "name", textContent: p.title }, badge);
      const button = el("button", { type: "button", textContent: "Get code" });
      button.dataset.provider = p.name;
      button.addEventListener("click", () => getCode(p.name).catch(handle));
      const item = el("li", {}, label, button);
      item.dataset.provider = p.name;
      list.append(item);
    }
    for (const p of providers) titles[p.name] = p.title;
    $("no-providers").hidden = offered.length > 0;
  }

  // --- codes ---------------------------------------------------------------------------------------
  async function getCode(provider) {
    setStatus("");
    const body = await api("POST", "/api/channels/" + encodeURIComponent(provider) + "/connect");
    current = {
      provider,
      title: titles[provider] || provider,
      code: body.code,
      expiresAt: Date.now() + body.expires_in * 1000,
      knownIds: new Set(lastConnectionIds),
    };
    $("code-provider").textContent = current.title;
    $("code").textContent = body.code;
    $("instruction").textContent = body.instruction;
    const link = $("deeplink");
    if (body.url) {
      link.href = body.url;
      link.textContent = body.url;
      link.hidden = false;
    } else {
      link.hidden = true;
      link.removeAttribute("href");
    }
    $("copy").textContent = "Copy";
    $("code-panel").hidden = false;
    // On a phone the panel is below the fold: bring the code to the person and move focus to it, so
    // "Get code" visibly does something (and a screen reader reads the code out).
    $("code-panel").scrollIntoView({ block: "center", behavior: "instant" });
    $("code-panel").focus({ preventScroll: true });
    tick();
    clearInterval(countdownTimer);
    countdownTimer = setInterval(tick, 1000);
  }

  function tick() {
    if (!current) return;
    const left = Math.max(0, Math.round((current.expiresAt - Date.now()) / 1000));
    const out = $("countdown");
    if (left === 0) {
      out.textContent = "This code has expired. Get a new one.";
      out.classList.add("expired");
      clearInterval(countdownTimer);
      return;
    }
    const minutes = Math.floor(left / 60);
    const seconds = String(left % 60).padStart(2, "0");
    out.textContent = "Expires in " + minutes + ":" + seconds;
    out.classList.remove("expired");
  }

  function hideCode() {
    current = null;
    clearInterval(countdownTimer);
    $("code-panel").hidden = true;
  }

  async function copyCode() {
    const code = $("code").textContent;
    try {
      await navigator.clipboard.writeText(code);
    } catch (_) {
      const range = document.createRange();
      range.selectNodeContents($("code"));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      document.execCommand("copy");
    }
    $("copy").textContent = "Copied";
  }

  // --- connections ---------------------------------------------------------------------------------
  function describe(c) {
    const who = c.external_name ? c.external_name + " (" + c.external_id + ")" : c.external_id;
    return c.workspace ? who + " · " + c.workspace : who;
  }

  function renderConnections(connections) {
    const list = $("connections");
    list.replaceChildren();
    for (const c of connections) {
      const label = el("span", { className: "name", textContent: titles[c.provider] || c.provider },
        el("span", { className: "sub", textContent: describe(c) }));
      const button = el("button", { type: "button", className: "danger", textContent: "Disconnect" });
      button.addEventListener("click", () => disconnect(c).catch(handle));
      const item = el("li", {}, label, button);
      item.dataset.connectionId = c.id;
      item.dataset.provider = c.provider;
      list.append(item);
    }
    $("no-connections").hidden = connections.length > 0;
  }

  function noticeNewConnection(connections) {
    if (current) {
      const fresh = connections.find((c) => c.provider === current.provider && !current.knownIds.has(c.id));
      if (fresh) {
        setStatus("Connected: " + current.title + " account " + describe(fresh) + ".", "ok");
        hideCode();
      }
    }
    lastConnectionIds = new Set(connections.map((c) => c.id));
  }

  async function disconnect(c) {
    await api("DELETE", "/api/channels/connections/" + encodeURIComponent(c.id));
    setStatus("Disconnected " + (titles[c.provider] || c.provider) + " account " + describe(c) + ".", "ok");
    await refresh();
  }

  // --- loop ----------------------------------------------------------------------------------------
  async function refresh() {
    const [providers, connections] = await Promise.all([
      api("GET", "/api/channels/providers"),
      api("GET", "/api/channels/connections"),
    ]);
    // Re-render only on change, so polling does not steal keyboard focus from a button.
    const providersJson = JSON.stringify(providers);
    if (providersJson !== lastProvidersJson) {
      lastProvidersJson = providersJson;
      renderProviders(providers);
    }
    const connectionsJson = JSON.stringify(connections);
    if (connectionsJson !== lastConnectionsJson) {
      lastConnectionsJson = connectionsJson;
      renderConnections(connections);
    }
    noticeNewConnection(connections);
  }

  function startPolling() {
    stopPolling();
    pollTimer = setInterval(() => refresh().catch(handle), POLL_MS);
  }

  function stopPolling() {
    clearInterval(pollTimer);
    pollTimer = null;
  }

  async function start() {
    if (mode === "jwt" && !token()) {
      showSignIn("");
      return;
    }
    try {
      await refresh();
    } catch (error) {
      handle(error);
      return;
    }
    showApp();
    startPolling();
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    session.setToken(value);
    $("token-input").value = "";
    start();
  });
  $("copy").addEventListener("click", () => copyCode());
  $("signout").addEventListener("click", () => {
    session.forget();
    hideCode();
    showSignIn("Signed out.");
  });

  start();
})();
