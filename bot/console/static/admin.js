// The operator console over /api/admin: channels, turns (stop one), approvals (decide), schedules
// (cancel), failed messages and GitHub deliveries (retry one), usage, people (unlink a connection).
// Plain JavaScript, no build step. All data is rendered with textContent (never innerHTML).
(() => {
  "use strict";

  const mode = document.body.dataset.authMode || "none";
  const TOKEN_KEY = "switchboard.admin-token";
  const POLL_MS = 3000;
  const $ = (id) => document.getElementById(id);
  let pollTimer = null;

  const { SignInNeeded, el, setStatus } = window.switchboardPage;
  // 401 and 403 both send the page back to sign-in: a person's token without the admin claim is no use here.
  const session = window.switchboardPage.client(mode, TOKEN_KEY, [401, 403]);
  const { api, token } = session;

  function age(seconds) {
    if (seconds < 120) return Math.round(seconds) + "s";
    if (seconds < 7200) return Math.round(seconds / 60) + "m";
    return Math.round(seconds / 3600) + "h";
  }

  function row(dataset, title, sub, badge, button) {
    const li = el("li");
    Object.assign(li.dataset, dataset);
    const what = el("div", { className: "what" },
      el("span", { className: "name", textContent: title }), badge, el("span", { className: "sub", textContent: sub }));
    li.append(what);
    if (button) li.append(button);
    return li;
  }

  function badge(text, kind) {
    return el("span", { className: "badge" + (kind ? " " + kind : ""), textContent: text });
  }

  // The lists are redrawn on every poll; a keyboard user's focus must survive that, so the focused
  // button is found again by its accessible name (each names its row) and focused in the new list.
  function fill(listId, emptyId, items) {
    const list = $(listId);
    const focused = list.contains(document.activeElement) ? document.activeElement.getAttribute("aria-label") : null;
    list.replaceChildren(...items);
    $(emptyId).hidden = items.length > 0;
    if (focused) {
      const again = [...list.querySelectorAll("button")].find((b) => b.getAttribute("aria-label") === focused);
      if (again) again.focus();
    }
  }

  // ``what`` names the row in the button's accessible name: a screen reader hears "Stop Ada's turn",
  // not five buttons all called "Stop".
  function action(label, kind, run, what) {
    const button = el("button", { type: "button", className: kind, textContent: label });
    if (what) button.setAttribute("aria-label", label + " " + what);
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        setStatus(await run(), "ok");
      } catch (err) {
        if (err instanceof SignInNeeded) return showSignIn(err.message);
        setStatus(err.message, "error");
      }
      await refresh();
    });
    return button;
  }

  function renderChannels(channels) {
    fill("channels", "no-channels", channels.map((c) => row(
      { channel: c.name }, c.name, [c.detail, c.intake].filter(Boolean).join(" · "),
      badge(c.state, c.state === "error" ? "bad" : "on"), null)));
  }

  function renderTurns(turns) {
    fill("turns", "no-turns", turns.map((t) => row(
      { entry: t.id, state: t.state }, t.sender + " · " + t.channel, t.text + " — " + age(t.age_seconds) + " ago",
      badge(t.state, t.state === "running" ? "on" : ""),
      t.state === "running" ? action("Stop", "danger", async () => {
        await api("POST", "/api/admin/turns/" + encodeURIComponent(t.id) + "/stop");
        return "Stopping " + t.sender + "'s turn.";
      }, t.sender + "'s turn") : null)));
  }

  function renderDead(entries) {
    fill("dead", "no-dead", entries.map((e) => row(
      { entry: e.id, status: e.status }, e.sender + " · " + e.channel,
      e.text + " — " + (e.error || "no error recorded") + " (" + e.attempts + " tries, " + age(e.age_seconds) + " ago)",
      badge(e.status, "bad"),
      action("Retry", "", async () => {
        await api("POST", "/api/admin/dead-letters/" + encodeURIComponent(e.id) + "/retry");
        return "Queued " + e.sender + "'s message for another run.";
      }, e.sender + "'s message"))));
  }

  function renderApprovals(approvals) {
    fill("approvals", "no-approvals", approvals.map((a) => {
      const decide = (verb, label, kind) => action(label, kind, async () => {
        return (await api("POST", "/api/admin/approvals/" + encodeURIComponent(a.id) + "/" + verb)).result;
      }, a.id);
      const buttons = el("div", { className: "buttons" },
        decide("approve", "Approve", ""), decide("deny", "Deny", "danger"));
      return row({ approval: a.id }, a.id + " · " + a.sender + " · " + a.channel,
        a.command + " — " + a.reason + " (" + age(a.age_seconds) + " ago)", null, buttons);
    }));
  }

  function renderSchedules(schedules) {
    fill("schedules", "no-schedules", schedules.map((s) => row(
      { schedule: s.id }, s.id + " · " + s.when + " · " + s.owner,
      s.what + " — next " + new Date(s.next_at * 1000).toLocaleString() + " (" + s.channel + ")", null,
      action("Cancel", "danger", async () => {
        await api("POST", "/api/admin/schedules/" + encodeURIComponent(s.id) + "/cancel");
        return "Cancelled schedule " + s.id + ".";
      }, "schedule " + s.id))));
  }

  function renderDeliveries(deliveries) {
    fill("deliveries", "no-deliveries", deliveries.map((d) => row(
      { delivery: d.id, status: d.status }, d.event, d.id + " — " + d.detail + " (" + d.attempts + " tries, " +
        age(d.age_seconds) + " ago)",
      badge(d.status, d.retryable ? "bad" : (d.status === "done" ? "on" : "")),
      d.retryable ? action("Retry", "", async () => {
        await api("POST", "/api/admin/deliveries/" + encodeURIComponent(d.id) + "/retry");
        return "Queued delivery " + d.id + " for another run.";
      }, "delivery " + d.id) : null)));
  }

  const count = (n) => n.toLocaleString("en");
  const plural = (n, word) => count(n) + " " + word + (n === 1 ? "" : "s");

  function renderUsage(rows) {
    fill("usage", "no-usage", rows.map((u) => row(
      { owner: u.owner }, u.owner,
      count(u.input_tokens) + " tokens in / " + count(u.output_tokens) + " out · " + plural(u.turns, "turn") +
        " in " + plural(u.threads, "conversation") + " · model " + u.models.join(", ") +
        " · cost today " + u.cost_today + " " + u.currency + ", this month " + u.cost_month + " " + u.currency,
      null, null)));
  }

  function renderPeople(people) {
    fill("people", "no-people", people.map((p) => {
      const li = el("li", { className: "person" });
      li.dataset.person = p.id;
      const links = el("ul", { className: "links" }, ...p.connections.map((c) => row(
        { connection: c.id }, c.provider + " · " + (c.external_name || c.external_id), c.workspace, null,
        action("Unlink", "danger", async () => {
          await api("POST", "/api/admin/people/" + encodeURIComponent(p.id) + "/connections/" +
            encodeURIComponent(c.id) + "/unlink");
          return "Unlinked " + p.id + "'s " + c.provider + " account.";
        }, p.id + "'s " + c.provider + " account"))));
      li.append(el("div", { className: "what" },
        el("span", { className: "name", textContent: p.id }),
        el("span", { className: "sub", textContent: p.connections.length ? "" : "no connected account" }),
        links));
      return li;
    }));
  }

  async function refresh() {
    try {
      const [channels, turns, approvals, schedules, dead, deliveries, usage, people] = await Promise.all([
        api("GET", "/api/admin/channels"), api("GET", "/api/admin/turns"), api("GET", "/api/admin/approvals"),
        api("GET", "/api/admin/schedules"), api("GET", "/api/admin/dead-letters"),
        api("GET", "/api/admin/deliveries"), api("GET", "/api/admin/usage"), api("GET", "/api/admin/people"),
      ]);
      renderChannels(channels);
      renderTurns(turns);
      renderApprovals(approvals);
      renderSchedules(schedules);
      renderDead(dead);
      renderDeliveries(deliveries);
      renderUsage(usage);
      renderPeople(people);
      showApp();
    } catch (err) {
      if (err instanceof SignInNeeded) return showSignIn(err.message);
      setStatus(err.message, "error");
    }
  }

  function showApp() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = mode !== "jwt";
    if (pollTimer === null) pollTimer = setInterval(refresh, POLL_MS);
  }

  function showSignIn(message) {
    clearInterval(pollTimer);
    pollTimer = null;
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = token() === null && message === "Please sign in." ? "" : message;
    $("token-input").focus();
  }

  $("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    session.setToken($("token-input").value.trim());
    $("token-input").value = "";
    await refresh();
  });
  $("signout").addEventListener("click", () => {
    session.forget();
    showSignIn("Signed out.");
  });
  $("refresh").addEventListener("click", refresh);
  refresh();
})();
