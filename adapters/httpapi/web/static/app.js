// Conveniences the page works without: "select all" for the parked rows
// shown (notifications by id, site calls by key), and the selection buttons enabled only when something is selected.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("bulk");
  if (!form) return;
  const boxes = () => Array.from(form.querySelectorAll('input[name="id"], input[name="key"]'));
  const all = form.querySelector("[data-select-all]");
  const buttons = form.querySelectorAll("[data-needs-selection]");
  const sync = () => {
    const n = boxes().filter((b) => b.checked).length;
    buttons.forEach((b) => { b.disabled = n === 0; });
    if (all) all.checked = n > 0 && n === boxes().length;
  };
  if (all) all.addEventListener("change", () => { boxes().forEach((b) => { b.checked = all.checked; }); sync(); });
  form.addEventListener("change", sync);
  sync();
});

// pagelist: relative times ("3 min ago", the exact UTC time in the title)
// kept current, and a list that refreshes itself in place: every
// data-refresh seconds the page fetches its own URL and swaps the rows,
// the chips' counts, the tiles and the pager, pausing while a row is
// ticked, text is selected or the tab is hidden.
(() => {
  const ago = (t, now) => {
    let d = Math.floor((now - t) / 1000);
    const future = d < 0;
    if (future) d = -d;
    if (d < 5) return "just now";
    let s;
    if (d < 60) s = d + " s";
    else if (d < 3600) s = Math.floor(d / 60) + " min";
    else if (d < 48 * 3600) s = Math.floor(d / 3600) + " h";
    else s = Math.floor(d / 86400) + " days";
    return future ? "in " + s : s + " ago";
  };
  const refreshTimes = (root) => {
    const now = Date.now();
    root.querySelectorAll("time[data-ago]").forEach((el) => {
      const t = Date.parse(el.dateTime);
      if (!Number.isNaN(t)) el.textContent = ago(t, now);
    });
  };
  document.addEventListener("DOMContentLoaded", () => {
    refreshTimes(document);
    setInterval(() => refreshTimes(document), 10000);

    const live = document.getElementById("live");
    const every = live ? Math.max(1, parseFloat(live.dataset.refresh)) * 1000 : NaN;
    if (!live || Number.isNaN(every)) return; // no list, or its refresh is off
    const state = document.createElement("span");
    state.className = "live-status";
    state.setAttribute("data-live-status", "");
    state.setAttribute("role", "status");
    const count = live.querySelector(".toolbar .count");
    if (count) count.after(state);
    const say = (text, paused) => { state.textContent = text; state.classList.toggle("paused", paused); };
    say("· live, every " + every / 1000 + " s", false);
    const why = () => {
      if (document.hidden) return "tab hidden";
      if (live.querySelector('input[type="checkbox"]:checked')) return "rows selected";
      const sel = window.getSelection ? String(window.getSelection()) : "";
      if (sel.trim() !== "") return "text selected";
      return "";
    };
    const swap = (doc, sel) => {
      const now = document.querySelector(sel);
      const fresh = doc.querySelector(sel);
      if (now && fresh) now.replaceWith(document.importNode(fresh, true));
    };
    let busy = false;
    let timer = 0;
    // pagefix: a failed refresh stops the refresh (no polling a server
    // that turned the session away, or is gone); a session the server
    // ended (a redirect, to /login, or 401/403) says so with a link that
    // logs in again and comes back here.
    const stop = (ended, why) => {
      clearInterval(timer);
      timer = 0;
      if (!ended) {
        say("· refresh stopped (" + why + "): reload the page", true);
        return;
      }
      say("· refresh stopped: session ended", true);
      if (document.getElementById("session-ended")) return;
      const note = document.createElement("p");
      note.id = "session-ended";
      note.className = "session-ended";
      note.setAttribute("role", "alert");
      const link = document.createElement("a");
      link.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
      link.textContent = "log in again";
      note.append("Session ended — ", link, " to see the list as it is now.");
      live.prepend(note);
    };
    const tick = async () => {
      if (!timer) return;
      const paused = why();
      if (paused) { say("· paused: " + paused, true); return; }
      if (busy) return;
      busy = true;
      try {
        let resp;
        try {
          resp = await fetch(location.href, { credentials: "same-origin", cache: "no-store", redirect: "manual", headers: { Accept: "text/html" } });
        } catch (err) {
          stop(false, err.message);
          return;
        }
        if (resp.type === "opaqueredirect" || resp.status === 401 || resp.status === 403) { stop(true); return; }
        if (!resp.ok) { stop(false, resp.status + " " + resp.statusText); return; }
        const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
        const late = why(); // a row ticked while the page was fetched stays as it is
        if (late) { say("· paused: " + late, true); return; }
        swap(doc, "#live table.rows tbody");
        swap(doc, "#live nav.pager");
        swap(doc, "section.tiles");
        swap(doc, ".sites-box table");
        doc.querySelectorAll("[data-count]").forEach((b) => {
          const mine = document.querySelector('[data-count="' + CSS.escape(b.dataset.count) + '"]');
          if (mine) mine.textContent = b.textContent;
        });
        const n = doc.querySelector("#live .toolbar .count");
        if (count && n) count.textContent = n.textContent;
        const form = document.getElementById("bulk");
        if (form) form.dispatchEvent(new Event("change"));
        refreshTimes(document);
        say("· live, updated " + new Date().toISOString().slice(11, 19) + " UTC", false);
      } catch (err) {
        stop(false, err.message);
      } finally {
        busy = false;
      }
    };
    timer = setInterval(tick, every);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
  });
})();
