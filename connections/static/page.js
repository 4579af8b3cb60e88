// What /connect and /admin share: the signed-in fetch, element building, the status line.
// Plain JavaScript, no build step; each page's own script uses window.switchboardPage.
(() => {
  "use strict";

  class SignInNeeded extends Error {}

  // A JSON client for one page: in jwt mode it sends the token kept in sessionStorage under
  // ``tokenKey``; an answer whose status is in ``signInStatuses`` forgets the token and throws
  // SignInNeeded (the page shows its sign-in form), any other error throws with the server's detail.
  function client(mode, tokenKey, signInStatuses) {
    const token = () => sessionStorage.getItem(tokenKey);
    async function api(method, path) {
      const headers = { Accept: "application/json" };
      if (mode === "jwt") {
        if (!token()) throw new SignInNeeded("Please sign in.");
        headers.Authorization = "Bearer " + token();
      }
      const res = await fetch(path, { method, headers });
      let body = null;
      if (res.status !== 204) {
        try { body = await res.json(); } catch (_) { /* no JSON body */ }
      }
      const detail = (body && body.detail) || res.status + " " + res.statusText;
      if (signInStatuses.includes(res.status)) {
        sessionStorage.removeItem(tokenKey);
        throw new SignInNeeded(detail);
      }
      if (!res.ok) throw new Error(detail);
      return body;
    }
    return {
      api,
      token,
      setToken: (value) => sessionStorage.setItem(tokenKey, value),
      forget: () => sessionStorage.removeItem(tokenKey),
    };
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function setStatus(text, kind) {
    const node = document.getElementById("status");
    node.textContent = text || "";
    node.className = "status" + (kind ? " " + kind : "");
  }

  window.switchboardPage = Object.freeze({ SignInNeeded, client, el, setStatus });
})();
