// The plan page, live. The server rendered the page as the database had it; this script
// follows the plan's event stream from there (GET /v1/plans/{id}/events?after=<last event
// id the page shows>, authenticated by the session cookie) and reads the page's routes —
// GETs only. Streamed words are inserted as text (text nodes), never as markup; the only
// markup it inserts is the server's own, rendered and sanitized there: the live fragment
// (GET /ui/plans/{id}/live), a phase's full text (…/phases/{key}/text) and the answer
// (…/answer).
"use strict";
(() => {
  const root = document.getElementById("plan");
  if (!root) return;

  const planId = root.dataset.plan;
  const api = `/v1/plans/${encodeURIComponent(planId)}`;
  const terminal = root.dataset.terminal;
  const STORED = ["plan_submitted", "phase_started", "phase_completed", "phase_failed", "phase_cancelled",
    "phases_skipped", "debate_inserted", "debate_limit_reached", "cancel_requested", "retry_requested",
    "resume_requested", "plan_updated", "decision_recorded", "rounds_skipped", "plan_finished",
    "input_requested", "input_received", "steered", "awaiting_approval", "sent_back", "approved"];
  // events that change who is awaited, the approval or the notes: the people panel is read again
  const PEOPLE = new Set(["input_requested", "input_received", "steered", "awaiting_approval", "sent_back",
    "approved", "cancel_requested", "resume_requested", "phases_skipped", "phase_failed", "plan_finished"]);
  const joinedLate = new Set(Array.from(document.querySelectorAll('.phase[data-status="running"]'),
    (card) => card.dataset.key));
  const documents = new Map(); // doc id -> Promise of GET /documents/{doc}
  const page = `/ui/plans/${encodeURIComponent(planId)}`;
  let source = null;
  let answer = null; // Promise, once the answer section was asked for
  let markdown = null; // the result's Markdown, once read (what Copy copies)

  const byKey = (key) => document.getElementById(`phase-${key}`);
  const signIn = () => `/ui/login?next=${encodeURIComponent(location.pathname)}`;

  function notice(text, withSignIn) {
    const box = document.getElementById("notice");
    box.replaceChildren(text);
    if (withSignIn) {
      const a = document.createElement("a");
      a.href = signIn();
      a.textContent = "Sign in again";
      box.append(" ", a);
    }
    box.hidden = false;
  }

  async function getJSON(path) {
    const r = await fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (r.status === 401) {
      notice("Your session has ended.", true);
      throw new Error("401");
    }
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r.json();
  }

  // The server's rendering of a part of the page, parsed inert (a template runs nothing).
  async function getHTML(path) {
    const r = await fetch(path, { credentials: "same-origin" });
    if (r.status === 401) {
      notice("Your session has ended.", true);
      throw new Error("401");
    }
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    const t = document.createElement("template");
    t.innerHTML = await r.text();
    return t.content;
  }

  // ------------------------------------------------------------------ statuses and timings

  function setStatus(card, status) {
    if (!card || card.dataset.status === status) return;
    card.dataset.status = status;
    for (const c of Array.from(card.classList)) if (c.startsWith("status-")) card.classList.remove(c);
    card.classList.add(`status-${status}`);
    const badge = card.querySelector('[data-role="status"]');
    if (badge) {
      badge.textContent = status.replace("_", " ");
      badge.className = `badge status-${status}`;
    }
  }

  function setPlanStatus(status) {
    const holder = document.getElementById("plan-status");
    holder.dataset.status = status;
    const badge = holder.querySelector(".badge");
    badge.textContent = status.replace("_", " ");
    badge.className = `badge status-${status}`;
  }

  function seconds(s) {
    if (s < 60) return `${s.toFixed(1)} s`;
    const w = Math.floor(s);
    if (w < 3600) return `${Math.floor(w / 60)} min ${String(w % 60).padStart(2, "0")} s`;
    return `${Math.floor(w / 3600)} h ${String(Math.floor((w % 3600) / 60)).padStart(2, "0")} min`;
  }

  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll(".took[data-started]")) {
      if (!el.dataset.started || el.dataset.finished) continue;
      const since = Date.parse(el.dataset.started);
      if (!Number.isNaN(since)) el.textContent = seconds(Math.max(0, (now - since) / 1000));
    }
  }

  // ------------------------------------------------------------------ words as they are spoken

  function follow(box) {
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 40) box.scrollTop = box.scrollHeight;
  }

  function onChunk(msg) {
    const card = byKey(msg.phase);
    if (!card) return;
    if (card.dataset.status === "pending") setStatus(card, "running");
    if (card.dataset.kind === "divergence") return; // a check writes JSON: its card shows the verdict
    const box = card.querySelector(".text");
    if (box.dataset.state !== "live") {
      box.replaceChildren();
      box.dataset.state = "live";
      if (joinedLate.has(msg.phase)) {
        const late = document.createElement("span");
        late.className = "late";
        late.title = "this page opened while the phase was being written";
        late.textContent = "… ";
        box.append(late);
      }
      box.append(document.createTextNode(""));
    }
    box.lastChild.appendData(msg.text);
    follow(box);
  }

  // A completed phase's full text, as the server renders it (Markdown, citations linked).
  async function loadText(key) {
    const card = byKey(key);
    if (!card || card.dataset.kind === "divergence") return;
    const html = await getHTML(`${page}/phases/${encodeURIComponent(key)}/text`);
    const box = byKey(key).querySelector(".text"); // the card may have been re-rendered: its box moved along
    box.replaceChildren(html);
    box.dataset.state = "full";
    box.scrollTop = 0;
    fit(byKey(key));
  }

  // "Read the full text" opens the card's text in full; "Show less" closes it again. The
  // state is the text box's, which a refresh moves into the fresh card.
  function fit(card) {
    const box = card.querySelector(".text");
    let more = card.querySelector(".more");
    if (!more && card.dataset.status === "completed" && card.dataset.kind !== "divergence") {
      more = document.createElement("button"); // a card rendered before its phase completed
      more.type = "button";
      more.className = "more";
      card.append(more);
    }
    if (!more) return;
    const open = box.classList.contains("open");
    more.textContent = open ? "Show less" : "Read the full text";
    more.setAttribute("aria-expanded", String(open));
    const fits = box.dataset.state === "full" && !open && box.scrollHeight <= box.clientHeight + 1;
    box.classList.toggle("fits", fits);
    more.hidden = fits;
  }

  async function toggleText(card) {
    const box = card.querySelector(".text");
    if (box.classList.contains("open")) {
      box.classList.remove("open");
    } else {
      if (box.dataset.state !== "full") await loadText(card.dataset.key);
      byKey(card.dataset.key).querySelector(".text").classList.add("open");
    }
    fit(byKey(card.dataset.key));
    drawSoon();
  }

  // ------------------------------------------------------------------ briefing passages

  // The document opens in a panel over the page's right edge (position: fixed): nothing
  // in the page moves, so the citation just clicked stays where the reader's eyes are.
  async function showPassage(button) {
    const docId = button.dataset.doc;
    const chunk = Number(button.dataset.chunk);
    if (!documents.has(docId)) documents.set(docId, getJSON(`${api}/documents/${encodeURIComponent(docId)}`));
    let doc;
    try {
      doc = await documents.get(docId);
    } catch (e) {
      documents.delete(docId);
      notice(`The document ${docId} could not be loaded.`);
      return;
    }
    const passage = doc.chunks.find((c) => c.chunk === chunk);
    const panel = document.getElementById("document");
    panel.querySelector(".doc-title").textContent = doc.title;
    panel.querySelector(".doc-path").textContent = passage
      ? [...passage.heading_path, `passage ${chunk}`].join(" › ") : `there is no passage ${chunk}`;
    const body = panel.querySelector(".doc-text");
    panel.dataset.doc = docId;
    panel.dataset.chunk = String(chunk);
    panel.hidden = false;
    for (const b of document.querySelectorAll(".cite-doc[aria-pressed]")) b.removeAttribute("aria-pressed");
    button.setAttribute("aria-pressed", "true");
    if (!passage) {
      body.replaceChildren(doc.text);
      return;
    }
    const mark = document.createElement("mark");
    mark.id = "passage";
    mark.textContent = doc.text.slice(passage.start, passage.end);
    body.replaceChildren(doc.text.slice(0, passage.start), mark, doc.text.slice(passage.end));
    body.scrollTop = Math.max(0, mark.offsetTop - body.clientHeight / 4);
  }

  function closePassage() {
    document.getElementById("document").hidden = true;
    for (const b of document.querySelectorAll(".cite-doc[aria-pressed]")) b.removeAttribute("aria-pressed");
  }

  // The answer section, rendered by the server once the result is written (and the
  // decision, when the tally is recorded before it).
  function showAnswer(again) {
    if (answer && !again) return answer;
    answer = getHTML(`${page}/answer`).then((html) => {
      const fresh = html.getElementById("answer");
      if (fresh) document.getElementById("answer").replaceWith(fresh);
      if (fresh && fresh.dataset.ready === "true") readMarkdown();
      else answer = null;
    }).catch(() => { answer = null; });
    return answer;
  }

  function readMarkdown() {
    if (markdown === null) {
      markdown = getJSON(`${api}/result`).then((r) => r.text).catch(() => { markdown = null; return null; });
    }
    return markdown;
  }

  // Copy the result's Markdown: the clipboard API where the page is a secure context,
  // else a selected text area (what a plain-HTTP host allows).
  async function copyResult(button) {
    const text = await readMarkdown();
    if (text === null) { notice("The result could not be read."); return; }
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        copied = true;
      }
    } catch (e) {
      copied = false;
    }
    if (!copied) {
      const area = document.createElement("textarea");
      area.value = text;
      area.className = "offscreen";
      area.setAttribute("readonly", "");
      document.body.append(area);
      area.select();
      try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
      area.remove();
    }
    button.dataset.state = copied ? "copied" : "failed";
    button.textContent = copied ? "Copied" : "Copy failed: use Download";
    setTimeout(() => { button.dataset.state = "idle"; button.textContent = "Copy Markdown"; }, 2500);
  }

  // ------------------------------------------------------------------ the graph, refreshed

  let refreshTimer = null;
  let refreshing = false;
  let again = false;

  function refreshSoon() {
    if (refreshTimer === null) refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 150);
  }

  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      const r = await fetch(`/ui/plans/${encodeURIComponent(planId)}/live`, { credentials: "same-origin" });
      if (r.status === 401) notice("Your session has ended.", true);
      else if (r.ok) apply(await r.text());
    } catch (e) {
      // the next event refreshes again
    } finally {
      refreshing = false;
      if (again) { again = false; refreshSoon(); }
    }
  }

  // The fragment is the server's rendering of the status, the overview and the graph.
  // Each card's text box belongs to this script: it moves into the fresh card.
  function apply(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    const fresh = t.content;
    for (const id of ["plan-status", "overview", "answer-waiting"]) {
      const node = fresh.getElementById(id);
      const shown = document.getElementById(id); // the waiting line is gone once the answer is shown
      if (node && shown) shown.replaceWith(node);
    }
    const graph = fresh.getElementById("graph");
    if (!graph) return;
    for (const card of graph.querySelectorAll(".phase")) {
      const old = byKey(card.dataset.key);
      if (old && old.dataset.kind !== "divergence" && old.querySelector(".text").dataset.state !== "summary") {
        card.querySelector(".text").replaceWith(old.querySelector(".text"));
      }
    }
    document.getElementById("graph").replaceWith(graph);
    for (const card of graph.querySelectorAll(".phase")) fit(card);
    markCited();
    watchSizes();
    drawSoon();
    tick();
  }

  // The card a phase citation points at (the URL's fragment) is marked with a class, not
  // only by :target: a refresh replaces the cards, and a fresh card is never the target.
  function markCited() {
    for (const card of document.querySelectorAll(".phase.cited")) card.classList.remove("cited");
    let id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    const card = id && document.getElementById(id);
    if (card && card.classList.contains("phase")) card.classList.add("cited");
  }

  let drawing = false;
  function drawSoon() {
    if (!drawing) { drawing = true; requestAnimationFrame(() => { drawing = false; drawEdges(); }); }
  }

  // Lines from each card's drawn inputs (data-drawn: the server left out an input the card
  // also has through another). A row of many phases is one group: its lines meet the group.
  // One path per line, named by its ends (a card's key, or "level-N" for a group).
  function anchor(card) {
    const group = card.closest(".level.grouped");
    return group ? [`level-${group.dataset.level}`, group.getBoundingClientRect()]
      : [card.dataset.key, card.getBoundingClientRect()];
  }

  function drawEdges() {
    const graph = document.getElementById("graph");
    const svg = graph.querySelector("svg.edges");
    const box = graph.getBoundingClientRect();
    svg.setAttribute("width", String(graph.scrollWidth));
    svg.setAttribute("height", String(graph.scrollHeight));
    const lines = new Map();
    for (const card of graph.querySelectorAll(".phase")) {
      const [toName, to] = anchor(card);
      for (const dep of (card.dataset.drawn || "").split(" ")) {
        const from = dep && byKey(dep);
        if (!from) continue;
        const [fromName, a] = anchor(from);
        const x1 = Math.round(a.left + a.width / 2 - box.left);
        const y1 = Math.round(a.bottom - box.top);
        const x2 = Math.round(to.left + to.width / 2 - box.left);
        const y2 = Math.round(to.top - box.top);
        if (fromName === toName || y2 <= y1) continue;
        const bend = Math.max(12, (y2 - y1) / 2);
        lines.set(`${fromName} ${toName}`, `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`);
      }
    }
    const paths = [];
    for (const [ends, d] of lines) {
      const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
      const [from, to] = ends.split(" ");
      path.setAttribute("d", d);
      path.dataset.from = from;
      path.dataset.to = to;
      paths.push(path);
    }
    svg.replaceChildren(...paths);
  }

  // drawn in the observer's callback: after layout, before paint, so a frame never shows
  // edges of the sizes before (text streams into the cards and grows them)
  const sizes = new ResizeObserver(drawEdges);
  function watchSizes() {
    sizes.disconnect();
    const graph = document.getElementById("graph");
    sizes.observe(graph);
    for (const card of graph.querySelectorAll(".phase")) sizes.observe(card);
  }

  // ------------------------------------------------------------------ the people panel

  // The server's rendering of who is awaited, the approval, the notes and the forms. What a
  // person is typing (each text area is named by data-keep) moves into the fresh panel, with
  // the focus: a refresh never loses an answer being written.
  let peopleBusy = null;
  function refreshPeople() {
    if (peopleBusy) { peopleBusy.then(refreshPeople); return; }
    peopleBusy = getHTML(`${page}/people`).then((html) => {
      const fresh = html.getElementById("people");
      const old = document.getElementById("people");
      if (!fresh || !old) return;
      const focused = document.activeElement && document.activeElement.dataset
        ? document.activeElement.dataset.keep : null;
      for (const area of old.querySelectorAll("textarea[data-keep]")) {
        const twin = fresh.querySelector(`textarea[data-keep="${CSS.escape(area.dataset.keep)}"]`);
        if (twin) twin.value = area.value;
      }
      old.replaceWith(fresh);
      // above the answer while the plan waits for a person, below it otherwise
      const answer = document.getElementById("answer");
      const waits = fresh.dataset.waiting !== "0" || fresh.dataset.approval === "awaiting";
      if (waits) answer.before(fresh); else answer.after(fresh);
      if (focused) {
        const again = fresh.querySelector(`textarea[data-keep="${CSS.escape(focused)}"]`);
        if (again) again.focus();
      }
    }).catch(() => {}).finally(() => { peopleBusy = null; });
  }

  // ------------------------------------------------------------------ the event stream

  function onStored(e) {
    const card = e.phase ? byKey(e.phase) : null;
    switch (e.type) {
      case "phase_started":
        if (card) {
          if (card.dataset.attempt !== String(e.data.attempt)) {
            const box = card.querySelector(".text");
            box.replaceChildren();
            delete box.dataset.state;
          }
          card.dataset.attempt = String(e.data.attempt);
          card.querySelector(".attempt").textContent = `attempt ${e.data.attempt}`;
          setStatus(card, "running");
          const took = card.querySelector(".took");
          took.dataset.started = e.created_at;
          took.dataset.finished = "";
        }
        break;
      case "phase_completed":
        setStatus(card, "completed");
        if (card) loadText(e.phase).catch(() => {});
        if (e.phase === terminal) showAnswer(true);
        break;
      case "decision_recorded":
        showAnswer(true);
        break;
      case "phase_failed":
        setStatus(card, "failed");
        break;
      case "phase_cancelled":
        setStatus(card, "cancelled");
        break;
      case "phases_skipped":
        for (const key of e.data.phases || []) setStatus(byKey(key), "skipped");
        break;
      case "input_requested":
        setStatus(card, "awaiting_input");
        break;
      case "awaiting_approval":
        setPlanStatus("awaiting_approval");
        showAnswer(true);
        break;
      case "sent_back":
        setPlanStatus("running");
        break;
      case "plan_finished":
        setPlanStatus(e.data.status);
        root.dataset.final = "true";
        if (source) source.close();
        live(false);
        if (document.getElementById("answer").dataset.ready !== "true") showAnswer(true);
        break;
      default:
        break;
    }
    if (PEOPLE.has(e.type)) refreshPeople();
    refreshSoon();
  }

  function live(on) {
    document.getElementById("live").hidden = !on;
  }

  function connect() {
    if (root.dataset.final === "true") return;
    source = new EventSource(`${api}/events?after=${encodeURIComponent(root.dataset.after || "0")}`);
    source.addEventListener("open", () => live(true));
    source.addEventListener("error", () => {
      live(false);
      if (source.readyState === EventSource.CLOSED && root.dataset.final !== "true") {
        notice("Live updates stopped (the session may have ended).", true);
      }
    });
    source.addEventListener("chunk", (m) => onChunk(JSON.parse(m.data)));
    for (const type of STORED) source.addEventListener(type, (m) => onStored(JSON.parse(m.data)));
  }

  // ------------------------------------------------------------------ clicks

  document.addEventListener("click", (ev) => {
    const target = ev.target instanceof Element ? ev.target : null;
    if (!target) return;
    const cite = target.closest(".cite-doc");
    if (cite) { showPassage(cite); return; }
    const more = target.closest(".phase .more");
    if (more) { toggleText(more.closest(".phase")).catch(() => {}); return; }
    const copy = target.closest("#copy-result");
    if (copy) { copyResult(copy); return; }
    if (target.closest("#document .close")) closePassage();
  });

  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !document.getElementById("document").hidden) closePassage();
  });
  window.addEventListener("hashchange", markCited);
  markCited();
  watchSizes();
  drawSoon();
  tick();
  setInterval(tick, 1000);
  for (const card of document.querySelectorAll(".phase")) fit(card);
  if (document.getElementById("answer").dataset.ready === "true") readMarkdown();
  connect();
})();
