// The live lesson's page: draws the state the server sends (serve/state.py), every text a
// lesson carries set as text, never as markup. The teacher's page (?teacher=TOKEN) steps
// the run; every page may look back through the steps already run.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const token = new URLSearchParams(location.search).get("teacher") || "";
  const $ = (id) => document.getElementById(id);
  let state = null;
  let teacher = false;
  let view = null; // the step looked at; null: the latest, following the run
  let received = 0; // performance.now() when `state` arrived
  let clock = 0; // the lesson's clock (ms) then, as the server sent it
  let pending = false; // a step request in flight

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // Prose with `code` spans, as lesson authors write SQL in narration.
  function prose(tag, cls, text) {
    const node = el(tag, cls);
    String(text).split(/(`[^`]+`)/).forEach((piece, i) => {
      if (i % 2) node.appendChild(el("code", null, piece.slice(1, -1)));
      else if (piece) node.appendChild(document.createTextNode(piece));
    });
    return node;
  }

  function voter() {
    let id = sessionStorage.getItem("jqd-voter");
    if (!id) {
      const bytes = new Uint8Array(12);
      crypto.getRandomValues(bytes);
      id = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      sessionStorage.setItem("jqd-voter", id);
    }
    return id;
  }

  function looked() {
    return view === null ? state.at : Math.min(view, state.at);
  }

  function seconds(ms) {
    return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
  }

  // How long a wait had lasted at step k: live at the latest step, else until the next step began.
  function soFar(entry, k) {
    const now = clock + (performance.now() - received);
    if (k === state.at) return now - entry.since_ms;
    const next = state.step_ms[k + 1];
    return (next === undefined ? now : next) - entry.since_ms;
  }

  function sessionIndex(name) {
    return state.lesson.sessions.findIndex((s) => s.name === name);
  }

  function place(node, entry, row) {
    const column = sessionIndex(entry.session);
    node.style.gridRow = String(row);
    node.style.gridColumn = column < 0 ? "1 / -1" : String(column + 1);
    if (column >= 0) node.style.borderLeftColor = state.lesson.sessions[column].colour;
    return node;
  }

  function linesNode(entry) {
    const pre = el("pre", "entry lines");
    entry.lines.forEach((line) => pre.appendChild(el("span", `l ${line.kind}`, line.text || " ")));
    return pre;
  }

  function waitingNode(entry, k) {
    const still = entry.until_step === null || entry.until_step > k;
    const box = el("div", still ? "entry waiting" : "entry waited");
    box.appendChild(el("pre", "l sql", entry.sql));
    if (entry.comment) box.appendChild(el("p", "comment", `-- ${entry.comment}`));
    if (still) {
      box.appendChild(el("p", "badge", "WAITING"));
      box.appendChild(el("p", "phrase", entry.phrase));
      const time = el("p", "sofar", `so far ${seconds(soFar(entry, k))}`);
      time.dataset.since = String(entry.since_ms);
      box.appendChild(time);
    } else {
      box.appendChild(el("p", "phrase", `waited ${seconds(entry.waited_ms)}: ${entry.phrase}`));
    }
    return box;
  }

  function cycleNode(entry) {
    const figure = el("figure", "entry cycle");
    const img = el("img");
    img.src = `/api/cycle/${entry.number}.svg`;
    img.alt = entry.summary;
    figure.appendChild(img);
    figure.appendChild(el("figcaption", null, `${entry.summary} Each arrow points from a waiting transaction to the one holding the lock it waits for.`));
    return figure;
  }

  function entryNode(entry, k) {
    if (entry.type === "narration") return prose("p", "entry narration", entry.text);
    if (entry.type === "waiting") return waitingNode(entry, k);
    if (entry.type === "cycle") return cycleNode(entry);
    return linesNode(entry);
  }

  function drawColumns(k) {
    const main = $("columns");
    main.replaceChildren();
    main.style.setProperty("--sessions", String(state.lesson.sessions.length));
    state.lesson.sessions.forEach((s, i) => {
      const head = el("h2", "session", s.label);
      head.style.gridRow = "1";
      head.style.gridColumn = String(i + 1);
      head.style.borderBottomColor = s.colour;
      head.style.color = s.colour;
      main.appendChild(head);
    });
    let row = 2;
    state.entries.forEach((entry) => {
      if (entry.step <= k) main.appendChild(place(entryNode(entry, k), entry, row++));
    });
  }

  // Who waits for whom at step k: an arrow from each waiting session to each it waits for.
  function drawGraph(k) {
    const box = $("graph");
    box.replaceChildren();
    const edges = [];
    state.entries.forEach((e) => {
      if (e.type === "waiting" && e.step <= k && (e.until_step === null || e.until_step > k)) {
        e.blockers.forEach((b) => edges.push({ from: e.session, to: b, what: e.kind }));
      }
    });
    box.hidden = !edges.length;
    if (!edges.length) return;
    box.appendChild(el("h2", null, "Who waits for whom"));
    const sessions = state.lesson.sessions;
    const gap = 150;
    const width = gap * sessions.length;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} 100`);
    svg.setAttribute("role", "img");
    const defs = document.createElementNS(SVG, "defs");
    const marker = document.createElementNS(SVG, "marker");
    [["id", "wf-head"], ["viewBox", "0 0 10 10"], ["refX", "9"], ["refY", "5"], ["markerWidth", "8"], ["markerHeight", "8"], ["orient", "auto"]]
      .forEach(([n, v]) => marker.setAttribute(n, v));
    const tip = document.createElementNS(SVG, "path");
    tip.setAttribute("d", "M0,0 L10,5 L0,10 z");
    marker.appendChild(tip);
    defs.appendChild(marker);
    svg.appendChild(defs);
    const x = (name) => gap / 2 + gap * Math.max(0, sessionIndex(name));
    edges.forEach((edge, i) => {
      const x1 = x(edge.from);
      const x2 = x(edge.to);
      // Rightwards above the names, leftwards below, so a cycle's two arrows part.
      const up = x1 < x2 ? -1 : 1;
      const bow = 50 + up * (44 + 4 * i);
      const path = document.createElementNS(SVG, "path");
      path.setAttribute("d", `M${x1},${50 + up * 14} Q${(x1 + x2) / 2},${bow} ${x2},${50 + up * 14}`);
      path.setAttribute("class", "edge");
      path.setAttribute("marker-end", "url(#wf-head)");
      svg.appendChild(path);
    });
    sessions.forEach((s) => {
      const text = document.createElementNS(SVG, "text");
      text.setAttribute("x", String(x(s.name)));
      text.setAttribute("y", "58");
      text.setAttribute("text-anchor", "middle");
      text.setAttribute("class", "node");
      text.setAttribute("fill", s.colour);
      text.textContent = s.label;
      svg.appendChild(text);
    });
    box.appendChild(svg);
    const list = el("ul", "edges");
    edges.forEach((edge) => list.appendChild(el("li", null, `${edge.from} waits for ${edge.to} (${edge.what})`)));
    box.appendChild(list);
  }

  function drawNext(k) {
    const next = $("next");
    next.replaceChildren();
    const total = state.lesson.total;
    if (view !== null && k < state.at) {
      next.appendChild(el("p", "looking", `Looking back at step ${k + 1}; the lesson is at step ${state.at + 1}.`));
      return;
    }
    if (state.phase === "ready" && state.next) {
      next.appendChild(el("p", "upcoming", `Next, step ${state.at + 2} of ${total}: ${state.next.text}`));
    } else if (state.phase === "running") {
      next.appendChild(el("p", "upcoming", `Running step ${state.at + 1} of ${total}…`));
    } else if (state.phase === "before") {
      next.appendChild(el("p", "upcoming", "The lesson is about to start."));
    }
  }

  const CHOICES = [["answers", "returns (rows or OK)"], ["waits", "waits"], ["fails", "fails"]];

  function tallyText(votes) {
    return CHOICES.map(([key, words]) => `${words}: ${votes.tally[key]}`).join(" · ");
  }

  const OUTCOME_WORDS = { answers: "returned", waits: "waited", fails: "failed" };

  // The step just run's tally and what it did, then the question for the next one.
  function drawPredict(k) {
    const box = $("predict");
    box.replaceChildren();
    const votes = state.votes;
    [k, k + 1].forEach((step) => {
      const shown = votes[String(step)];
      if (!shown || !shown.tally) return;
      box.appendChild(el("p", "tally", `Step ${step + 1}, ${shown.step.session}: the class said ${tallyText(shown)}`));
      const outcome = state.outcomes[String(step)];
      if (outcome && step <= k) box.appendChild(el("p", "outcome", `It ${OUTCOME_WORDS[outcome]}.`));
    });
    const asked = view === null ? state.asking : null;
    if (asked !== null) {
      box.appendChild(el("p", "question", `Predict: what will ${state.next.session}'s statement do?`));
      const buttons = el("p", "choices");
      CHOICES.forEach(([key, words]) => {
        const button = el("button", "choice", words);
        button.type = "button";
        button.dataset.choice = key;
        button.addEventListener("click", () => vote(key));
        buttons.appendChild(button);
      });
      box.appendChild(buttons);
      const count = votes[String(asked)] ? votes[String(asked)].count : 0;
      box.appendChild(el("p", "count", `${count} vote${count === 1 ? "" : "s"} so far`));
    }
    box.hidden = !box.firstChild;
  }

  function drawEnd() {
    const box = $("end");
    box.replaceChildren();
    if (state.phase === "over" && state.verdict) {
      const v = state.verdict;
      box.appendChild(el("p", v.met ? "verdict met" : "verdict unmet",
        v.met ? `Every expectation met (${v.checked} checked).` : `${v.mismatches.length} expectation(s) not met.`));
      v.mismatches.forEach((m) => box.appendChild(el("p", "mismatch", m)));
      const link = el("a", null, "The page of the whole run");
      link.href = "/lesson.html";
      box.appendChild(link);
    }
    if (state.message) box.appendChild(el("p", "message", state.message));
    box.hidden = !box.firstChild;
  }

  function draw() {
    if (!state) return;
    const k = looked();
    document.title = state.lesson.title;
    $("title").textContent = state.lesson.title;
    $("summary").textContent = state.lesson.summary || "";
    $("server").textContent = `on ${state.lesson.server}`;
    $("role").textContent = teacher ? "· teacher" : "";
    const total = state.lesson.total;
    $("position").textContent = k < 0 ? `${total} steps` : `step ${k + 1} of ${total}`;
    $("back").disabled = k <= 0;
    $("forward").disabled = view === null;
    $("latest").disabled = view === null;
    const step = $("step");
    step.hidden = !teacher;
    step.disabled = pending || state.phase !== "ready";
    step.textContent = state.asking !== null ? "Reveal the class's answers" : "Run the next step";
    drawNext(k);
    drawPredict(k);
    drawEnd();
    drawColumns(k);
    drawGraph(k);
    const body = document.body.dataset;
    body.version = String(state.version);
    body.at = String(state.at);
    body.view = String(k);
    body.phase = state.phase;
    body.renderedAt = String(performance.timeOrigin + performance.now());
  }

  function apply(message) {
    const next = message.state;
    if (state && next.version <= state.version) return;
    const moved = !state || next.entries.length !== state.entries.length || next.phase !== state.phase
      || next.asking !== state.asking;
    state = next;
    received = performance.now();
    clock = message.now_ms;
    draw();
    // Following the lesson, its newest step stays in sight, as on a projected terminal.
    if (moved && view === null) follow();
  }

  function follow() {
    const stage = $("stage");
    stage.scrollTop = stage.scrollHeight;
  }

  function tick() {
    if (!state) return;
    document.querySelectorAll(".sofar").forEach((node) => {
      const since = Number(node.dataset.since);
      if (looked() === state.at && state.phase !== "over" && state.phase !== "stopped") {
        node.textContent = `so far ${seconds(clock + (performance.now() - received) - since)}`;
      }
    });
  }

  async function stepRun() {
    if (!teacher || pending || !state || state.phase !== "ready") return;
    pending = true;
    view = null;
    draw();
    try {
      const answer = await fetch(`/api/step?teacher=${encodeURIComponent(token)}`, { method: "POST" });
      if (!answer.ok) $("position").textContent = `step refused (${answer.status})`;
    } finally {
      pending = false;
      draw();
    }
  }

  async function vote(choice) {
    await fetch("/api/vote", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ voter: voter(), choice }),
    });
  }

  function look(delta) {
    if (!state) return;
    const k = looked() + delta;
    view = Math.max(0, Math.min(k, state.at));
    if (view >= state.at) view = null;
    draw();
    follow();
  }

  function keys(event) {
    if (event.target instanceof HTMLButtonElement && event.key === " ") return; // the button's own press
    if (event.key === "ArrowLeft") look(-1);
    else if (event.key === "ArrowRight" && view !== null) look(1);
    else if ((event.key === "ArrowRight" || event.key === " ") && teacher) stepRun();
    else return;
    event.preventDefault();
  }

  function listen() {
    const stream = new EventSource("/api/events");
    stream.addEventListener("state", (e) => apply(JSON.parse(e.data)));
    stream.addEventListener("end", () => {
      stream.close();
      document.body.dataset.ended = "true";
      $("position").textContent = "the lesson has ended";
    });
    stream.onerror = () => {
      if (stream.readyState === EventSource.CLOSED) $("position").textContent = "disconnected from the lesson";
    };
  }

  async function start() {
    $("back").addEventListener("click", () => look(-1));
    $("forward").addEventListener("click", () => look(1));
    $("latest").addEventListener("click", () => { view = null; draw(); follow(); });
    $("step").addEventListener("click", stepRun);
    document.addEventListener("keydown", keys);
    const answer = await fetch(`/api/state?teacher=${encodeURIComponent(token)}`);
    const first = await answer.json();
    teacher = first.teacher;
    apply(first);
    listen();
    setInterval(tick, 250);
  }

  start();
})();
