// The plan list, kept fresh: every few seconds while the page is visible, the table is
// read again with the page's own filters (GET /ui/list?<the same query>, rendered by the
// server) and put in place of the old one. GETs only; the only markup inserted is the
// server's own.
"use strict";
(() => {
  const root = document.getElementById("listing");
  if (!root) return;
  const every = Number(root.dataset.refresh) || 4000;
  const path = `/ui/list${root.dataset.query ? `?${root.dataset.query}` : ""}`;
  let busy = false;

  function stamp(text) {
    document.getElementById("refreshed").textContent = text;
  }

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const r = await fetch(path, { credentials: "same-origin" });
      if (r.status === 401) {
        stamp("Your session has ended: reload to sign in again.");
        clearInterval(timer);
        return;
      }
      if (!r.ok) { stamp(`not refreshed (HTTP ${r.status})`); return; }
      const t = document.createElement("template");
      t.innerHTML = await r.text();
      const fresh = t.content.getElementById("plans-table");
      if (fresh) document.getElementById("plans-table").replaceWith(fresh);
      root.dataset.refreshed = String(Number(root.dataset.refreshed || "0") + 1);
      stamp(`updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      stamp("not refreshed (offline?)");
    } finally {
      busy = false;
    }
  }

  const timer = setInterval(refresh, every);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
})();
