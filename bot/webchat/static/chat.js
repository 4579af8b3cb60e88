// The web chat: plain JavaScript over /api/chat (no build step). The token lives in sessionStorage under
// the same key as /connect's. Replies stream over GET .../events, read with fetch (EventSource cannot
// send the Authorization header). Text is always set with textContent: nothing from the bot is HTML.
(function () {
  "use strict";

  const TOKEN_KEY = "switchboard.token";
  const mode = document.body.dataset.authMode;
  const $ = (id) => document.getElementById(id);

  let current = null; // the open conversation's id
  let stream = null; // its AbortController
  let conversations = [];

  class SignInNeeded extends Error {}

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function headers() {
    const h = {};
    if (mode === "jwt") {
      if (!token()) throw new SignInNeeded("Please sign in.");
      h.Authorization = "Bearer " + token();
    }
    return h;
  }

  async function api(method, path, body) {
    const res = await fetch(path, { method, headers: headers(), body });
    if (res.status === 401) {
      const detail = (await res.json().catch(() => ({}))).detail;
      sessionStorage.removeItem(TOKEN_KEY);
      throw new SignInNeeded(detail || "Please sign in again.");
    }
    if (!res.ok) {
      const detail = (await res.json().catch(() => ({}))).detail;
      throw new Error(typeof detail === "string" ? detail : "The server answered " + res.status + ".");
    }
    return res.status === 204 ? null : res.json();
  }

  function status(text, isError) {
    const el = $("status");
    el.textContent = text || "";
    el.classList.toggle("error", Boolean(isError));
  }

  function showSignIn(message) {
    if (stream) stream.abort();
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
    $("token-input").focus();
  }

  function fail(err) {
    if (err instanceof SignInNeeded) showSignIn(err.message);
    else status(err.message || String(err), true);
  }

  function newId() {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes);
    return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // --- conversation list ------------------------------------------------------------------------
  function renderList() {
    const list = $("conversations");
    list.replaceChildren();
    for (const c of conversations) {
      const li = document.createElement("li");
      li.dataset.conversation = c.id;
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = c.title;
      button.setAttribute("aria-current", c.id === current ? "true" : "false");
      button.addEventListener("click", () => {
        openConversation(c.id);
        closeList();
        $("message-input").focus();
      });
      li.append(button);
      list.append(li);
    }
    $("no-conversations").hidden = conversations.length > 0;
  }

  async function loadList() {
    conversations = await api("GET", "/api/chat/conversations");
    renderList();
  }

  function openList() {
    $("sidebar").classList.add("open");
    $("toggle-list").setAttribute("aria-expanded", "true");
    const first = $("sidebar").querySelector("button");
    if (first) first.focus();
  }

  function closeList() {
    if (!$("sidebar").classList.contains("open")) return;
    $("sidebar").classList.remove("open");
    $("toggle-list").setAttribute("aria-expanded", "false");
  }

  // --- messages ---------------------------------------------------------------------------------
  function entryElement(entry) {
    let li = $("messages").querySelector('li[data-ref="' + CSS.escape(entry.ref) + '"]');
    if (!li) {
      li = document.createElement("li");
      li.dataset.ref = entry.ref;
      $("messages").append(li);
    }
    return li;
  }

  function renderEntry(entry) {
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const li = entryElement(entry);
    li.className = "msg " + entry.role + (entry.live ? " live" : "");
    li.dataset.live = entry.live ? "true" : "false";
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = entry.text;
    const parts = [text];
    if (entry.files.length) {
      const files = document.createElement("div");
      files.className = "files";
      for (const f of entry.files) {
        if (f.id) {
          const b = document.createElement("button");
          b.type = "button";
          b.textContent = "Download " + f.name;
          b.addEventListener("click", () => download(f).catch(fail));
          files.append(b);
        } else {
          const s = document.createElement("span");
          s.className = "muted";
          s.textContent = "📎 " + f.name;
          files.append(s);
        }
      }
      parts.push(files);
    }
    if (entry.actions.length) {
      const actions = document.createElement("div");
      actions.className = "actions";
      for (const a of entry.actions) {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = a.label;
        b.dataset.command = a.command;
        if (a.style === "danger") b.className = "danger";
        else if (a.style !== "primary") b.className = "secondary";
        b.addEventListener("click", () => press(entry.ref, a.command));
        actions.append(b);
      }
      parts.push(actions);
    }
    li.replaceChildren(...parts);
    $("empty").hidden = true;
    if (atBottom) box.scrollTop = box.scrollHeight;
    updateStop();
  }

  function stopAction() {
    // The reply being written carries its own Stop button (/stop TOKEN): the page's Stop presses it.
    for (const b of $("messages").querySelectorAll('li[data-live="true"] .actions button')) {
      if (b.dataset.command.startsWith("/stop")) return { ref: b.closest("li").dataset.ref, command: b.dataset.command };
    }
    return null;
  }

  function updateStop() {
    const running = stopAction() !== null;
    $("stop").disabled = !running;
    if (!running && $("status").textContent === "Stopping…") status("Stopped.");
  }

  async function download(file) {
    const res = await fetch("/api/chat/files/" + encodeURIComponent(file.id), { headers: headers() });
    if (!res.ok) throw new Error("Could not download " + file.name + " (" + res.status + ").");
    const url = URL.createObjectURL(await res.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = file.name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // --- the live stream --------------------------------------------------------------------------
  function handle(event) {
    if (event.type === "snapshot") {
      $("messages").replaceChildren();
      $("empty").hidden = event.entries.length > 0;
      for (const e of event.entries) renderEntry(e);
      const box = $("messages");
      box.scrollTop = box.scrollHeight;
      updateStop();
    } else if (event.type === "entry") {
      renderEntry(event.entry);
    } else if (event.type === "delete") {
      const li = $("messages").querySelector('li[data-ref="' + CSS.escape(event.ref) + '"]');
      if (li) li.remove();
      updateStop();
    }
  }

  async function follow(id, controller) {
    while (!controller.signal.aborted) {
      try {
        const res = await fetch("/api/chat/conversations/" + encodeURIComponent(id) + "/events", {
          headers: headers(),
          signal: controller.signal,
        });
        if (res.status === 401) throw new SignInNeeded("Please sign in again.");
        if (!res.ok) throw new Error("The conversation could not be opened (" + res.status + ").");
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
            if (data) handle(JSON.parse(data));
          }
        }
      } catch (err) {
        if (controller.signal.aborted) return;
        if (err instanceof SignInNeeded) return fail(err);
        status("Reconnecting…");
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  function openConversation(id) {
    if (stream) stream.abort();
    current = id;
    history.replaceState(null, "", "#" + id);
    $("messages").replaceChildren();
    $("empty").hidden = false;
    const c = conversations.find((x) => x.id === id);
    $("title").textContent = c ? c.title : "New conversation";
    renderList();
    updateStop();
    stream = new AbortController();
    follow(id, stream);
  }

  async function newConversation() {
    const c = await api("POST", "/api/chat/conversations");
    conversations.unshift(c);
    openConversation(c.id);
    return c.id;
  }

  // --- sending ----------------------------------------------------------------------------------
  async function post(text, files, pressed) {
    const id = current || (await newConversation());
    const form = new FormData();
    form.append("client_id", newId());
    form.append("text", text);
    if (pressed) form.append("pressed", pressed);
    for (const f of files) form.append("files", f, f.name);
    const path = "/api/chat/conversations/" + encodeURIComponent(id) + "/messages";
    try {
      await api("POST", path, form);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err; // the network, not the server: the same client_id
      await api("POST", path, form); // again is stored (and answered) once
    }
  }

  async function send() {
    const input = $("message-input");
    const text = input.value;
    const files = Array.from($("file-input").files);
    if (!text.trim() && !files.length) return;
    $("send").disabled = true;
    try {
      await post(text, files, null);
      input.value = "";
      $("file-input").value = "";
      $("attached").textContent = "";
      status("");
      const known = conversations.find((c) => c.id === current);
      if (known && known.title === "New conversation" && text.trim()) {
        known.title = text.trim().slice(0, 80);
        $("title").textContent = known.title;
        renderList();
      }
    } catch (err) {
      fail(err);
    } finally {
      $("send").disabled = false;
      input.focus();
    }
  }

  async function press(ref, command) {
    const stopping = command.startsWith("/stop");
    if (stopping) status("Stopping…"); // before the POST: the answer may end before it returns
    try {
      await post(command, [], ref);
      if (stopping) updateStop();
    } catch (err) {
      fail(err);
    }
  }

  // --- start ------------------------------------------------------------------------------------
  async function start() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = mode !== "jwt";
    try {
      await loadList();
      const wanted = location.hash.slice(1);
      if (wanted && conversations.some((c) => c.id === wanted)) openConversation(wanted);
      else if (conversations.length) openConversation(conversations[0].id);
      else renderList();
      $("message-input").focus();
    } catch (err) {
      fail(err);
    }
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("message-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("file-input").addEventListener("change", () => {
    const names = Array.from($("file-input").files).map((f) => f.name);
    $("attached").textContent = names.length ? "Attached: " + names.join(", ") : "";
  });
  $("stop").addEventListener("click", () => {
    const action = stopAction();
    if (action) press(action.ref, action.command);
  });
  $("new-chat").addEventListener("click", () => {
    closeList();
    newConversation().then(() => $("message-input").focus(), fail);
  });
  $("toggle-list").addEventListener("click", () => {
    if ($("sidebar").classList.contains("open")) closeList();
    else openList();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && $("sidebar").classList.contains("open")) {
      closeList();
      $("toggle-list").focus();
    }
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token-input").value = "";
    start();
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn("Signed out.");
  });

  if (mode === "jwt" && !token()) showSignIn("");
  else start();
})();
