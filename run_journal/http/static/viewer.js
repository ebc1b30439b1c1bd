/* run-journal viewer: plain JavaScript over the read-only API, no build step, no dependency.
 *
 * Routes (in the URL fragment): #/ threads, #/t/THREAD a thread, #/t/THREAD/r/RUN a run,
 * #/t/THREAD/compare?a=RUN&b=RUN two runs of a thread compared, #/runs?FILTERS runs of every thread,
 * #/usage cost and tokens per day.
 * Every text from the store goes into the page with textContent, never as HTML.
 */
"use strict";
(() => {
  const PAGE = 200;          // timeline events per page
  const THREADS = 50;        // threads per page
  const STEPS = 50;          // subagent steps per card page
  const TERMINAL = new Set(["run.end", "run.error", "run.interrupt", "run.cancel"]);
  const MODEL_EVENTS = new Set(["llm.request", "llm.ai.response", "ai_message", "llm.error"]);
  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  let view = 0;              // bumps on every navigation: late answers of an old view are dropped
  let stopLive = null;       // aborts the live follow of the run on screen

  // -- DOM and formatting helpers -----------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }
  function fill(el, ...children) {   // replaceChildren, leaving out null / false (conditional parts)
    el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  }
  const enc = encodeURIComponent;
  const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  function cost(c) {   // a tiny cost is not free: "<$0.0001"
    if (c === null || c === undefined) return "–";
    const n = Number(c);
    return n > 0 && n < 0.0001 ? "<$0.0001" : "$" + n.toFixed(4);
  }
  function clock(iso) {     // HH:MM:SS.mmm of an ISO time (isoformat drops a zero fraction)
    const m = /T(\d\d:\d\d:\d\d)(?:\.(\d+))?/.exec(iso || "");
    return m ? m[1] + "." + (m[2] || "").padEnd(3, "0").slice(0, 3) : "";
  }
  const when = (iso) => (iso ? iso.slice(0, 16).replace("T", " ") : "–");
  function took(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(2) + " s";
    return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
  }
  function oneLine(text, width = 240) {
    const flat = String(text ?? "").replace(/\s+/g, " ").trim();
    return flat.length > width ? flat.slice(0, width - 1) + "…" : flat;
  }
  const field = (obj, key, dflt = "") => (obj && typeof obj === "object" && key in obj ? obj[key] : dflt);
  const pill = (text, cls) => h("span", { class: "pill " + (cls || "st-" + text) }, text);
  // lead_agent, agent:<name> (a named agent of a supervisor or swarm), subagent:<name>, middleware:<name>
  const callerKind = (caller) => (/^(agent|subagent|middleware):/.exec(caller || "") || [null, "lead"])[1];
  const callerTag = (caller) => (caller ? h("span", { class: "who who-" + callerKind(caller), title: caller }, caller) : "");

  // -- the API ----------------------------------------------------------------------------------
  class HttpError extends Error {
    constructor(status, body) { super(body && body.detail ? body.detail : "HTTP " + status); this.status = status; }
  }
  function headers(extra) {
    const token = sessionStorage.getItem("run-journal-token");
    return Object.assign(token ? { Authorization: "Bearer " + token } : {}, extra || {});
  }
  async function api(path, params, payload) {   // a GET, or with a payload a POST of JSON
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value === null || value === undefined) continue;
      for (const item of Array.isArray(value) ? value : [value]) query.append(key, String(item));
    }
    const text = query.toString();
    const init = payload === undefined ? { headers: headers() }
      : { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(payload) };
    const response = await fetch("api/" + path + (text ? "?" + text : ""), init);
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (!response.ok) throw new HttpError(response.status, body);
    return body;
  }

  // -- routing ----------------------------------------------------------------------------------
  function route() {
    const [path, query] = location.hash.replace(/^#/, "").split("?");
    const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(query || "") };
  }
  function setCrumbs(items) {
    fill(crumbs);
    const nav = document.getElementById("sections");
    if (nav && !nav.childElementCount) nav.append(h("a", { href: "#/" }, "threads"), h("a", { href: "#/runs" }, "runs"),
      h("a", { href: "#/usage" }, "usage"));
    items.forEach(([text, href], i) => {
      if (i) crumbs.append(h("span", { class: "sep" }, "/"));
      crumbs.append(href ? h("a", { href }, text) : h("span", {}, text));
    });
  }
  async function render() {
    const token = ++view;
    if (stopLive) { stopLive(); stopLive = null; }
    const { parts, query } = route();
    try {
      if (parts[0] === "t" && parts.length === 2) await threadView(parts[1], token);
      else if (parts[0] === "t" && parts[2] === "compare" && parts.length === 3) {
        await compareView(parts[1], query.get("a"), query.get("b"), token);
      }
      else if (parts[0] === "runs" && parts.length === 1) await runsView(query, token);
      else if (parts[0] === "usage" && parts.length === 1) await usageView(query, token);
      else if (parts[0] === "t" && parts[2] === "r" && parts.length === 4) {
        await runView(parts[1], parts[3], Number(query.get("after") || 0), token);
      } else await threadsView(query.get("after"), token);
    } catch (error) {
      if (token === view) showError(error);
    }
  }
  function showError(error) {
    if (error instanceof HttpError && error.status === 401) {
      const refused = sessionStorage.getItem("run-journal-token") !== null;
      sessionStorage.removeItem("run-journal-token");
      const input = h("input", { type: "password", placeholder: "token", "aria-label": "token" });
      const form = h("form", { class: "token", onsubmit: (event) => {
        event.preventDefault();
        sessionStorage.setItem("run-journal-token", input.value);
        render();
      } }, input, h("button", { type: "submit" }, "Open"));
      fill(main, h("div", { class: "panel" }, h("h2", {}, "This journal asks for a token"),
        refused ? h("p", { class: "error-box", id: "token-refused" }, "The server refused that token. Check it and try again.") : null,
        h("p", { class: "muted" }, "Paste the token the server was started with (--token). It is kept for this tab only."),
        form));
      return;
    }
    fill(main, h("div", { class: "error-box" }, h("b", {}, "Could not load: "), String(error.message || error)));
  }

  // -- threads --------------------------------------------------------------------------------------
  async function threadsView(after, token) {
    setCrumbs([["threads", null]]);
    const page = await api("threads", { limit: THREADS, after });
    if (token !== view) return;
    const rows = page.data.map((t) => {
      const last = t.latest_run;
      return h("tr", {},
        h("td", { class: "mono" }, h("a", { href: "#/t/" + enc(t.thread_id) }, t.thread_id)),
        h("td", { class: "num" }, num(t.run_count)),
        h("td", { class: "num" }, num(t.message_count)),
        h("td", { class: "num" }, num(t.total_tokens)),
        h("td", { class: "num" }, t.run_count ? cost(t.cost_usd) : "–"),
        h("td", {}, last ? pill(last.status) : "–"),
        h("td", {}, last ? when(last.started_at) : "–"),
        h("td", { class: "num" }, last ? took(last.duration_ms) : "–"),
        h("td", { class: "clip" }, last ? oneLine(last.first_human_message, 80) : ""));
    });
    const pager = h("div", { class: "pager" },
      after ? h("a", { class: "button", href: "#/" }, "« First page") : null,
      page.has_more ? h("a", { class: "button", href: "#/?after=" + enc(page.next_after) }, "Next page ›") : null,
      h("span", { class: "muted" }, page.data.length + " thread(s)" + (after ? " after " + after : "")));
    fill(main,
      h("h1", {}, "Threads"),
      h("div", { class: "panel" }, page.data.length ? h("table", { id: "threads" },
        h("thead", {}, h("tr", {}, ["thread", "runs", "messages", "tokens", "cost", "latest run", "started (UTC)",
          "took", "first message"].map((name, i) =>
          h("th", { class: (i >= 1 && i <= 4) || i === 7 ? "num" : null }, name)))),
        h("tbody", {}, rows)) : h("p", { class: "muted" }, "No threads in this store yet."), pager));
  }

  // -- runs of every thread, filtered --------------------------------------------------------------
  const RANGES = [["", "any time"], ["1h", "last hour"], ["1d", "last 24 hours"], ["7d", "last 7 days"], ["30d", "last 30 days"]];
  const STATUSES = ["", "success", "error", "interrupted", "cancelled", "running", "pending", "timed_out"];
  function textMatches(run, text) {
    if (!text) return true;
    const hay = [run.run_id, run.thread_id, run.first_human_message, run.last_ai_message, run.error]
      .filter(Boolean).join("\n").toLowerCase();
    return hay.includes(text.toLowerCase());
  }
  async function runsView(query, token) {
    setCrumbs([["threads", "#/"], ["runs", null]]);
    const filters = { status: query.get("status") || "", range: query.get("range") || "", model: query.get("model") || "",
      tool: query.get("tool") || "", text: query.get("text") || "" };
    const page = await api("runs", { status: filters.status || null, since: filters.range || null,
      model: filters.model || null, tool: filters.tool || null, limit: 50, cursor: query.get("cursor") });
    if (token !== view) return;
    const input = (name, label) => h("label", {}, label, h("input", { name, value: filters[name], "aria-label": label,
      placeholder: name === "text" ? "words in the messages" : name === "tool" ? "a tool name" : "a model name" }));
    const choose = (name, options, label) => h("label", {}, label, h("select", { name, "aria-label": label },
      options.map(([value, text]) => h("option", { value, selected: filters[name] === value }, text))));
    const form = h("form", { class: "filters", id: "run-filters", onsubmit: (event) => {
      event.preventDefault();
      const chosen = new URLSearchParams();
      for (const [key, value] of new FormData(form)) if (value) chosen.set(key, String(value));
      location.hash = "#/runs" + (chosen.toString() ? "?" + chosen : "");
    } }, choose("status", STATUSES.map((st) => [st, st || "any status"]), "status"), choose("range", RANGES, "started"),
      input("model", "model"), input("tool", "tool"), input("text", "text"), h("button", { type: "submit" }, "Filter"),
      h("a", { class: "button", href: "#/runs" }, "Clear"));
    const shown = page.data.filter((r) => textMatches(r, filters.text));
    const rows = shown.map((r) => h("tr", { "data-run": r.run_id },
      h("td", { class: "mono" }, h("a", { href: "#/t/" + enc(r.thread_id) + "/r/" + enc(r.run_id) }, r.run_id)),
      h("td", { class: "mono" }, h("a", { href: "#/t/" + enc(r.thread_id) }, r.thread_id)),
      h("td", {}, pill(r.status)), h("td", {}, when(r.started_at)), h("td", { class: "num" }, took(r.duration_ms)),
      h("td", { class: "num" }, num(r.usage.llm_calls)), h("td", { class: "num" }, num(r.usage.total_tokens)),
      h("td", { class: "num" }, cost(r.usage.cost_usd)), h("td", { class: "clip" }, oneLine(r.first_human_message || "", 80))));
    const again = new URLSearchParams(query);
    again.set("cursor", page.next_cursor || "");
    fill(main, h("h1", {}, "Runs"),
      h("div", { class: "panel" }, form,
        shown.length ? h("table", { id: "all-runs" }, h("thead", {}, h("tr", {}, ["run", "thread", "status", "started (UTC)", "took",
          "model calls", "tokens", "cost", "first message"].map((name, i) => h("th", { class: i >= 4 && i <= 7 ? "num" : null }, name)))),
        h("tbody", {}, rows)) : h("p", { class: "muted", id: "no-runs" }, "No run matches these filters."),
        h("div", { class: "pager" },
          query.get("cursor") ? h("a", { class: "button", href: "#/runs?" + new URLSearchParams([...query].filter(([k]) => k !== "cursor")) }, "« Newest") : null,
          page.has_more && page.next_cursor ? h("a", { class: "button", id: "older-runs", href: "#/runs?" + again }, "Older runs ›") : null,
          h("span", { class: "muted" }, shown.length + " run(s)" + (filters.text && shown.length !== page.data.length
            ? " of " + page.data.length + " on this page match the text" : "") + ", newest first"))));
  }

  // -- cost and tokens per day ----------------------------------------------------------------------
  async function usageView(query, token) {
    setCrumbs([["threads", "#/"], ["usage", null]]);
    const range = query.get("range") || "30d";
    const [days, models, callers] = await Promise.all(["day", "model", "caller"].map((by) => api("usage", { by, since: range })));
    if (token !== view) return;
    const table = (title, found) => h("div", { class: "panel" }, h("h2", {}, title), h("table", { class: "usage-table" },
      h("thead", {}, h("tr", {}, ["", "runs", "model calls", "tokens", "cost"].map((n, i) => h("th", { class: i ? "num" : null }, n)))),
      h("tbody", {}, usageRows(found).map((u) => h("tr", { "data-key": u.key }, h("td", { class: "mono" }, u.key),
        h("td", { class: "num" }, num(u.runs)), h("td", { class: "num" }, num(u.llm_calls)),
        h("td", { class: "num" }, num(u.total_tokens)), h("td", { class: "num", title: u.unpriced ? u.unpriced + " run(s) of unknown price" : null },
          cost(u.cost_usd) + (u.unpriced ? " + ?" : "")))))));
    fill(main, h("h1", {}, "Usage"),
      h("div", { class: "panel" }, h("div", { class: "pager" }, RANGES.slice(1).map(([value, text]) =>
        h("a", { class: "button" + (value === range ? " current" : ""), href: "#/usage?range=" + value }, text))),
        h("h2", {}, "Cost and tokens per day (UTC)"), dayChart(usageRows(days).filter((d) => /^\d{4}-\d\d-\d\d$/.test(d.key)))),
      h("div", { class: "grid2" }, table("By model", models), table("By caller", callers)));
  }
  function usageRows(found) {   // /api/usage buckets; a bucket with unpriced calls shows the cost that is known
    return (found.data || []).map((b) => {
      const u = b.usage || {};
      return { key: b.key, runs: b.runs, llm_calls: u.llm_calls, total_tokens: u.total_tokens || 0,
        cost_usd: u.cost_usd ?? b.known_cost_usd ?? null, unpriced: b.unpriced_runs || 0 };
    });
  }
  const SVG = (() => {   // the SVG namespace, as the HTML parser gives it
    const probe = document.createElement("div");
    probe.innerHTML = "<svg></svg>";
    return probe.firstChild.namespaceURI;
  })();
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, value);
    for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return el;
  }
  function everyDay(days) {   // the days between the first and the last, those without runs as zero
    const byKey = new Map(days.map((d) => [d.key, d]));
    const out = [];
    const last = Date.parse(days[days.length - 1].key + "T00:00:00Z");
    for (let t = Date.parse(days[0].key + "T00:00:00Z"); t <= last && out.length < 1000; t += 86400e3) {
      const key = new Date(t).toISOString().slice(0, 10);
      out.push(byKey.get(key) || { key, runs: 0, llm_calls: 0, total_tokens: 0, cost_usd: 0, unpriced: 0 });
    }
    return out;
  }
  function dayChart(found) {   // tokens as bars (left scale), cost as a line (right scale); one column a day
    if (!found.length) return h("p", { class: "muted", id: "day-chart" }, "No runs in this time range.");
    const days = everyDay(found);
    const W = 900, H = 240, L = 64, R = 64, T = 14, B = 36;
    const width = (W - L - R) / days.length;
    const topTokens = Math.max(1, ...days.map((d) => d.total_tokens || 0));
    const topCost = Math.max(1e-9, ...days.map((d) => d.cost_usd || 0));
    const y = (value, top) => T + (H - T - B) * (1 - value / top);
    const chart = svg("svg", { id: "day-chart", viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": "tokens and cost per day", class: "day-chart" });
    for (const f of [0, 0.5, 1]) {
      chart.append(svg("line", { x1: L, x2: W - R, y1: y(topTokens * f, topTokens), y2: y(topTokens * f, topTokens), class: "grid" }),
        svg("text", { x: L - 6, y: y(topTokens * f, topTokens) + 4, class: "axis tokens", "text-anchor": "end" }, num(Math.round(topTokens * f))),
        svg("text", { x: W - R + 6, y: y(topCost * f, topCost) + 4, class: "axis cost" }, cost(topCost * f)));
    }
    const every = Math.max(1, Math.ceil(days.length / 10));
    const points = [];
    days.forEach((d, i) => {
      const x = L + i * width;
      const top = y(d.total_tokens || 0, topTokens);
      chart.append(svg("rect", { x: x + width * 0.15, y: top, width: width * 0.7, height: H - B - top, class: "bar-tokens",
        "data-day": d.key, "data-tokens": d.total_tokens || 0 }, svg("title", {}, d.key + ": " + num(d.total_tokens) + " tokens, " +
        cost(d.cost_usd) + (d.runs !== null ? ", " + num(d.runs) + " run(s)" : ""))));
      if (i % every === 0) chart.append(svg("text", { x: x + width / 2, y: H - B + 16, class: "axis", "text-anchor": "middle" }, d.key.slice(5)));
      if (d.cost_usd !== null) points.push([x + width / 2, y(d.cost_usd, topCost), d]);
    });
    if (points.length) {
      chart.append(svg("polyline", { points: points.map(([px, py]) => px + "," + py).join(" "), class: "line-cost" }));
      for (const [px, py, d] of points) {
        chart.append(svg("circle", { cx: px, cy: py, r: 3.5, class: "dot-cost" + (d.unpriced ? " unpriced" : ""), "data-day": d.key,
          "data-cost": d.cost_usd }, svg("title", {}, d.key + ": " + cost(d.cost_usd) +
          (d.unpriced ? " known; " + d.unpriced + " run(s) of unknown price" : ""))));
      }
    }
    return h("div", { class: "chart" }, chart, h("div", { class: "legend" }, h("span", {}, h("i", { class: "in" }), "tokens (left)"),
      h("span", {}, h("i", { class: "cost" }), "cost in USD (right)")));
  }

  // -- a thread -------------------------------------------------------------------------------------
  async function threadView(threadId, token) {
    setCrumbs([["threads", "#/"], [threadId, null]]);
    const [runs, usage, history] = await Promise.all([
      api("threads/" + enc(threadId) + "/runs", { limit: 1000 }),
      api("threads/" + enc(threadId) + "/token-usage"),
      api("threads/" + enc(threadId) + "/messages/page", { limit: 20 }),
    ]);
    if (token !== view) return;
    const rows = runs.data.map((r) => h("tr", {},
      h("td", { class: "mono" }, h("a", { href: "#/t/" + enc(threadId) + "/r/" + enc(r.run_id) }, r.run_id)),
      h("td", {}, pill(r.status)),
      h("td", {}, when(r.started_at)),
      h("td", { class: "num" }, took(r.duration_ms)),
      h("td", { class: "num" }, num(r.usage.llm_calls)),
      h("td", { class: "num" }, num(r.usage.total_tokens)),
      h("td", { class: "num" }, cost(r.usage.cost_usd)),
      h("td", { class: "clip" }, oneLine(r.first_human_message || "", 80))));
    const chat = h("div", { class: "chat", id: "conversation" });
    const more = h("button", { type: "button" }, "Load older messages");
    let before = history.next_before_seq;
    more.disabled = !history.has_more;
    more.addEventListener("click", async () => {
      const older = await api("threads/" + enc(threadId) + "/messages/page", { limit: 20, before_seq: before });
      chat.prepend(...older.data.map(chatMessage));
      before = older.next_before_seq;
      more.disabled = !older.has_more;
    });
    chat.append(...history.data.map(chatMessage));
    let comparing = null;
    if (runs.data.length >= 2) {
      const choice = (id, picked) => h("select", { id, "aria-label": id === "compare-a" ? "run A" : "run B" },
        runs.data.map((r) => h("option", { value: r.run_id, selected: r.run_id === picked }, r.run_id + " · " + r.status)));
      const ids = runs.data.map((r) => r.run_id).sort((x, y) => startOf(runs.data, x) - startOf(runs.data, y));
      const a = choice("compare-a", ids[ids.length - 2]), b = choice("compare-b", ids[ids.length - 1]);
      comparing = h("form", { class: "compare-form", id: "compare-form", onsubmit: (event) => {
        event.preventDefault();
        location.hash = "#/t/" + enc(threadId) + "/compare?a=" + enc(a.value) + "&b=" + enc(b.value);
      } }, h("span", { class: "muted" }, "Compare run"), a, h("span", { class: "muted" }, "with"), b,
        h("button", { type: "submit" }, "Compare"));
    }
    fill(main,
      h("h1", {}, "Thread ", h("span", { class: "mono" }, threadId)),
      h("div", { class: "panel" }, h("h2", {}, "Runs"),
        runs.has_more ? h("p", { class: "muted" }, "The first " + runs.data.length + " of " + runs.total + " runs.") : null,
        h("table", { id: "runs" },
        h("thead", {}, h("tr", {}, ["run", "status", "started (UTC)", "took", "model calls", "tokens", "cost",
          "first message"].map((name, i) => h("th", { class: i >= 3 && i <= 6 ? "num" : null }, name)))),
        h("tbody", {}, rows)), comparing),
      h("div", { class: "grid2" },
        h("div", { class: "panel" }, h("h2", {}, "Token usage of the thread"), usageChart(usage)),
        h("div", { class: "panel" }, h("h2", {}, "Conversation"), more, chat)));
  }
  function startOf(rows, runId) {
    const row = rows.find((r) => r.run_id === runId);
    return row && row.started_at ? Date.parse(row.started_at) : 0;
  }
  function chatMessage(event) {
    const content = event.content;
    const kind = field(content, "type", event.event_type === "llm.human.input" ? "human" : "ai");
    let text = messageText(content);
    if (event.event_type === "llm.tool.result") text = (field(content, "name") || "tool") + " → " + text;
    const calls = field(content, "tool_calls", []) || [];
    if (calls.length) text += (text ? "\n" : "") + "[calls " + calls.map((c) => c.name).join(", ") + "]";
    const caller = field(event.metadata, "caller", "");
    return h("div", { class: "msg " + kind, "data-seq": event.seq },
      h("small", {}, "#" + event.seq + " " + event.event_type + " ", caller && caller !== "lead_agent" ? callerTag(caller) : null),
      text || "(empty)");
  }
  function messageText(content) {
    if (content && typeof content === "object" && !Array.isArray(content)) content = content.content;
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content.map((b) => (typeof b === "string" ? b : b && b.type === "text" ? b.text : "")).filter(Boolean).join(" ");
    }
    return content === null || content === undefined ? "" : JSON.stringify(content);
  }

  // -- usage chart ----------------------------------------------------------------------------------
  function usageChart(usage) {
    const sections = [["by model", usage.by_model], ["by caller", usage.by_caller]];
    const all = sections.flatMap(([, buckets]) => Object.values(buckets || {}));
    const top = Math.max(1, ...all.map((u) => u.total_tokens || u.input_tokens + u.output_tokens));
    const box = h("div", { class: "chart usage-chart" });
    for (const [title, buckets] of sections) {
      const names = Object.keys(buckets || {});
      box.append(h("div", { class: "muted" }, title));
      if (!names.length) box.append(h("div", { class: "muted" }, "no model calls"));
      for (const name of names) {
        const u = buckets[name];
        const bar = h("div", { class: "bar", title: num(u.input_tokens) + " in, " + num(u.output_tokens) + " out" },
          h("div", { class: "in" }), h("div", { class: "out" }));
        bar.children[0].style.width = (100 * u.input_tokens / top).toFixed(2) + "%";
        bar.children[1].style.width = (100 * u.output_tokens / top).toFixed(2) + "%";
        box.append(h("div", { class: "bar-row", "data-name": name },
          h("span", { class: "label mono", title: name }, name), bar,
          h("span", { class: "value" }, num(u.total_tokens) + " tok · " + cost(u.cost_usd) + " · " + u.llm_calls + " call(s)")));
      }
    }
    box.append(h("div", { class: "legend" }, h("span", {}, h("i", { class: "in" }), "input tokens"),
      h("span", {}, h("i", { class: "out" }), "output tokens")));
    return box;
  }

  // -- a run ----------------------------------------------------------------------------------------
  async function runView(threadId, runId, after, token) {
    const base = "threads/" + enc(threadId) + "/runs/" + enc(runId);
    setCrumbs([["threads", "#/"], [threadId, "#/t/" + enc(threadId)], [runId, null]]);
    const [run, page, review, scores] = await Promise.all([
      api(base), api(base + "/events", { limit: PAGE, after_seq: after }), api(base + "/workspace-changes"),
      api(base + "/events", { event_types: "run.score", limit: 100 }),
    ]);
    if (token !== view) return;
    const state = { threadId, runId, base, after, page, run, token };
    const status = h("span", { id: "run-status" }, pill(run.status));
    const live = h("span", { id: "live" });
    const stats = h("div", { class: "panel", id: "run-stats" });
    const timeline = h("div", { class: "timeline", id: "timeline" });
    const pager = h("div", { class: "pager", id: "pager" });
    const pagerBottom = h("div", { class: "pager" });
    state.nodes = { status, live, stats, timeline, pager, pagerBottom };
    const chartPanel = h("div", { class: "panel", id: "usage" }, h("h2", {}, "Token usage"), usageChart({
      by_model: run.usage_by_model, by_caller: run.usage_by_caller }));
    fill(main,
      h("h1", {}, "Run ", h("span", { class: "mono" }, runId), status, live),
      stats,
      scoresPanel(state, scores),
      h("div", { class: "grid2" }, chartPanel, workspacePanel(review)),
      h("div", { class: "panel" }, h("h2", {}, "Timeline"), pager, timeline, pagerBottom));
    fillStats(state);
    drawTimeline(state);
    if (run.status === "error") showRunError(state).catch(showError);
    if (run.status === "running" || run.status === "pending") followRun(state);
  }
  function fillStats(state) {
    const r = state.run;
    const stat = (value, label) => h("div", { class: "stat" }, h("b", {}, value), h("span", {}, label));
    fill(state.nodes.stats, h("div", { class: "stats" },
      stat(when(r.started_at), "started (UTC)"), stat(took(r.duration_ms), "duration"),
      stat(num(r.usage.llm_calls), "model calls"),
      stat(num(r.usage.input_tokens) + " / " + num(r.usage.output_tokens), "tokens in / out"),
      stat(cost(r.usage.cost_usd), r.cost_note ? h("span", { id: "cost-note", title: r.cost_note }, "cost: " + oneLine(r.cost_note, 90)) : "cost"),
      stat(num(r.tool_call_count) + (r.tool_error_count ? " (" + r.tool_error_count + " failed)" : ""), "tool calls"),
      stat(num(r.message_count), "messages"),
      r.resumed_from ? stat(h("a", { href: "#/t/" + enc(state.threadId) + "/r/" + enc(r.resumed_from) },
        r.resumed_from.slice(0, 12)), "resumes") : null),
      r.error ? h("p", { class: "error-box" }, r.error) : null);
    fill(state.nodes.status, pill(r.status));
  }
  async function showRunError(state) {
    const found = await api(state.base + "/events", { event_types: "run.error", limit: 1 });
    if (state.token !== view || !found.data.length) return;
    const c = found.data[0].content || {};
    const box = h("div", { class: "error-box", id: "run-error" },
      h("b", {}, field(c, "error_type", "Error") + ": "), String(field(c, "message", "")),
      field(c, "node", null) ? h("span", { class: "muted" }, " (in node " + c.node + ")") : null,
      field(c, "traceback", null) ? h("pre", { class: "traceback" }, c.traceback) : null,
      field(c, "traceback_truncated", false) ? h("p", { class: "muted" }, "The traceback's start was cut; its end is kept.") : null);
    const old = state.nodes.stats.querySelector(".error-box");
    if (old) old.replaceWith(box); else state.nodes.stats.append(box);
  }
  function drawTimeline(state) {
    const { page, after, nodes } = state;
    const events = page.data;
    const outcomes = new Map();
    for (const e of events) if (e.event_type === "tool.outcome") outcomes.set(field(e.content, "tool_call_id"), e);
    const paired = new Set();
    const cards = new Set();
    const rows = [];
    for (const e of events) {
      const task = field(e.metadata, "task_id", null);
      if (task !== null && e.category === "subagent") {
        if (!cards.has(task)) { cards.add(task); rows.push(taskCard(state, task, e)); }
        continue;
      }
      if (e.event_type === "tool.call") {
        const outcome = outcomes.get(field(e.content, "tool_call_id"));
        if (outcome) paired.add(outcome.seq);
        rows.push(eventRow(e, outcome, state));
      } else if (!(e.event_type === "tool.outcome" && paired.has(e.seq))) {
        rows.push(eventRow(e, null, state));
      }
    }
    fill(nodes.timeline, ...rows);
    if (!events.length) nodes.timeline.append(h("p", { class: "muted" }, "No events on this page."));
    const first = events.length ? events[0].seq : after;
    const last = events.length ? events[events.length - 1].seq : after;
    const link = (cursor) => "#/t/" + enc(state.threadId) + "/r/" + enc(state.runId) + (cursor ? "?after=" + cursor : "");
    const controls = (top) => [
      after ? h("a", { class: "button", href: link(0) }, "« First") : null,
      h("span", { class: "muted", id: top ? "page-range" : null }, events.length + " event(s), seq " + first + "–" + last),
      page.has_more ? h("a", { class: "button", id: top ? "next-page" : null, href: link(page.next_after_seq) },
        "Next " + PAGE + " ›") : null];
    fill(nodes.pager, controls(true));
    fill(nodes.pagerBottom, events.length > 30 ? controls(false) : []);
  }
  function eventRow(e, outcome, state) {
    const caller = field(e.metadata, "caller", "");
    const classes = ["ev", "cat-" + e.category];
    if (callerKind(caller) === "subagent" || callerKind(caller) === "agent") classes.push("sub");
    if (TERMINAL.has(e.event_type)) classes.push("terminal");
    const text = h("span", { class: "text" }, summary(e));
    if (outcome) {
      const ok = field(outcome.content, "outcome") === "success";
      const bits = [field(outcome.content, "outcome")];
      const ms = field(outcome.content, "duration_ms", null);
      if (ms !== null) bits.push(ms + " ms");
      const size = field(outcome.content, "result_size", null);
      if (size !== null) bits.push(size + " B");
      if (field(outcome.content, "error")) bits.push(field(outcome.content, "error"));
      text.append(" ", h("span", { class: "outcome " + (ok ? "ok" : "bad"), title: "tool.outcome #" + outcome.seq },
        (ok ? "✓ " : "✗ ") + bits.join(" · ")));
    }
    const row = h("div", { class: classes.join(" "), "data-seq": e.seq, "data-type": e.event_type,
      role: "button", tabindex: "0", title: "seq " + e.seq + " · click for the whole record" },
      h("span", { class: "time" }, clock(e.created_at)),
      h("span", { class: "seq" }, e.seq),
      h("span", { class: "type" }, e.event_type),
      h("span", { class: "caller" }, callerTag(caller)),
      text,
      h("span", { class: "usage" }, usageCell(e)));
    const toggle = async () => {
      const next = row.nextElementSibling;
      if (next && next.classList.contains("detail")) { next.remove(); row.classList.remove("open"); return; }
      row.classList.add("open");
      const record = outcome ? { event: e, outcome } : e;
      const call = MODEL_EVENTS.has(e.event_type) && state ? await modelCallOf(state, e) : null;
      if (!row.classList.contains("open") || (row.nextElementSibling && row.nextElementSibling.classList.contains("detail"))) return;
      row.after(call ? callView(call, record) : detailView(record));
    };
    row.addEventListener("click", toggle);
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") toggle(); });
    return row;
  }
  function detailView(record) {   // the record as JSON; a multi-line text (a traceback) as itself
    const texts = [];
    const lift = (value, path) => {
      if (typeof value === "string" && value.includes("\n")) { texts.push([path, value]); return "(" + path + ": below)"; }
      if (Array.isArray(value)) return value.map((item, i) => lift(item, path + "[" + i + "]"));
      if (value && typeof value === "object") {
        return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, lift(v, path ? path + "." + k : k)]));
      }
      return value;
    };
    const shown = lift(record, "");
    return h("div", { class: "detail" }, h("pre", { class: "json" }, JSON.stringify(shown, null, 2)),
      texts.flatMap(([path, text]) => [h("div", { class: "label" }, path), h("pre", { class: "text", "data-path": path }, text)]));
  }
  function usageCell(e) {
    const usage = field(e.metadata, "usage", null);
    if (!usage || typeof usage !== "object") return "";
    const parts = [num(usage.input_tokens || 0) + "+" + num(usage.output_tokens || 0) + " tok"];
    const c = field(e.metadata, "cost_usd", null);
    if (c !== null) parts.push(cost(c));
    const model = field(e.metadata, "model_name", "");
    if (model) parts.push(model);
    return parts.join(" · ");
  }
  function summary(e) {
    const c = e.content, m = e.metadata || {};
    const name = e.event_type === "ai_message" ? "llm.ai.response" : e.event_type;
    const dur = typeof m.duration_ms === "number" ? " in " + (m.duration_ms / 1000).toFixed(2) + "s" : "";
    switch (name) {
      case "run.start": {
        const resumed = field(c, "resumed_from", null) || m.resumed_from;
        return field(c, "run_name", "run") + (resumed ? " (resumes " + resumed + ")" : "");
      }
      case "run.end": return "success" + dur;
      case "run.error": case "llm.error":
        return field(c, "error_type", "Error") + ": " + oneLine(field(c, "message")) + dur;
      case "run.interrupt": {
        const values = (field(c, "interrupts", []) || []).map((i) => oneLine(JSON.stringify(field(i, "value", i)), 80));
        return "waiting for a human: " + (values.join(", ") || "interrupt") + dur;
      }
      case "run.cancel": return "cancelled: " + field(c, "reason") + (m.reconciled ? " (reconciled)" : "");
      case "run.score":
        return field(c, "name") + " = " + scoreValue(field(c, "value")) + " (" + field(c, "source", "?") + ")" +
          (field(c, "comment") ? ": " + oneLine(c.comment, 160) : "");
      case "llm.request": {
        const n = field(c, "message_count", null);
        return "sent " + (n === null ? "a request" : n + " message(s)") + (field(c, "tools_sha256", null) ? " and tools" : "") +
          (m.model_name ? " to " + m.model_name : "") + " · click to see it";
      }
      case "agent.handoff":
        return field(c, "from_agent", "?") + " → " + field(c, "to_agent", "?") + " hands over" +
          (field(c, "tool_call_id", null) ? " (tool call " + c.tool_call_id + ")" : "");
      case "llm.human.input": return oneLine(messageText(c));
      case "llm.ai.response": {
        const calls = (field(c, "tool_calls", []) || []).map((t) => t.name);
        const text = oneLine(messageText(c));
        return (text + (calls.length ? " [calls " + calls.join(", ") + "]" : "")).trim() || "(empty)";
      }
      case "llm.tool.result": {
        const status = m.status || field(c, "status");
        return (m.tool_name || field(c, "name") || "tool") + " → " + (status ? status + ": " : "") + oneLine(messageText(c));
      }
      case "tool.call": return field(c, "tool_name") + "(" + oneLine(field(c, "args_preview"), 160) + ")";
      case "tool.outcome": {
        const bits = [field(c, "tool_name") + " " + field(c, "outcome", "?")];
        if (typeof field(c, "result_size", null) === "number") bits.push(c.result_size + " bytes");
        if (field(c, "error")) bits.push("error: " + c.error);
        return bits.join(", ");
      }
      case "context:memory": return "memory sha256 " + String(field(c, "content_sha256")).slice(0, 16) + "…";
      case "workspace_changes": return typeof c === "string" ? c : "workspace changes";
      default:
        if (name.startsWith("middleware:")) {
          return field(c, "name") + " " + field(c, "hook") + ": " + field(c, "action") + " " + oneLine(JSON.stringify(field(c, "changes", {})), 80);
        }
        if (name.startsWith("subagent.")) return "task " + field(c, "task_id") + " " + oneLine(field(c, "text") || field(c, "status") || "");
        return typeof c === "string" ? oneLine(c) : oneLine(JSON.stringify(c));
    }
  }

  // -- a model call: what it was sent next to what it answered ---------------------------------------
  async function modelCallOf(state, e) {
    if (!state.calls) {
      state.calls = api(state.base + "/calls").then((found) => found.data).catch(() => []);
    }
    const calls = await state.calls;
    const index = field(e.metadata, "llm_call_index", null);
    return calls.find((c) => c.reply_seq === e.seq || c.request_seq === e.seq) ||
      (index === null ? null : calls.find((c) => c.index === index)) || null;
  }
  function messageBody(message) {
    const text = messageText(message);
    const calls = field(message, "tool_calls", []) || [];
    return [text ? h("div", { class: "text" }, text) : null,
      calls.map((t) => h("div", { class: "tool-call mono" }, "→ " + t.name + "(" + JSON.stringify(t.args || {}) + ")" +
        (t.id ? "  " + t.id : "")))];
  }
  function callView(call, record) {
    const req = call.request;
    const left = h("div", { class: "call-request" }, h("h3", {}, "Request",
      h("span", { class: "muted" }, " · " + (call.model || "model") + " · " + callerText(call.caller))));
    if (!req) {
      left.append(h("p", { class: "muted" }, "This run was journaled without requests (record_requests=False)."));
    } else {
      const messages = req.messages.slice();
      const system = messages.length && messages[0].type === "system" ? messages.shift() : null;
      if (system) {
        const text = messageText(system);
        left.append(h("details", { class: "system-prompt" }, h("summary", {}, "System prompt (" + text.length + " characters)"),
          h("pre", {}, text)));
      }
      if (req.missing && req.missing.length) {
        left.append(h("p", { class: "error-box" }, req.missing.length + " stored part(s) of this request are missing: " +
          "only the messages after them are shown."));
      }
      left.append(h("ol", { class: "request-messages", start: system ? 2 : 1 }, messages.map((m) =>
        h("li", { class: "rm rm-" + (m.type || "message") }, h("small", {}, m.type || "message",
          m.name ? " " + m.name : "", m.tool_call_id ? " · " + m.tool_call_id : ""), messageBody(m)))));
      const tools = req.tools || [];
      left.append(h("details", { class: "request-tools" }, h("summary", {}, tools.length ? "Tools offered (" + tools.length + ")" : "No tools offered"),
        h("ul", {}, tools.map((t) => {
          const fn = t && t.function ? t.function : t || {};
          return h("li", { "data-tool": fn.name }, h("b", { class: "mono" }, fn.name || "?"), " ", h("span", { class: "muted" }, fn.description || ""),
            h("pre", { class: "schema" }, JSON.stringify(fn.parameters || {}, null, 2)));
        }))));
      const params = Object.entries(req.params || {});
      if (params.length) {
        left.append(h("table", { class: "request-params" }, h("tbody", {}, params.map(([k, v]) =>
          h("tr", {}, h("th", {}, k), h("td", { class: "mono" }, typeof v === "string" ? v : JSON.stringify(v)))))));
      }
    }
    const right = h("div", { class: "call-reply" }, h("h3", {}, "Reply"));
    if (call.reply) right.append(h("div", { class: "rm rm-ai" }, messageBody(call.reply)));
    else if (call.error) right.append(h("p", { class: "error-box" }, (call.error.error_type || "Error") + ": " + (call.error.message || "")));
    else right.append(h("p", { class: "muted" }, "No reply: the call never ended."));
    const u = call.usage || {};
    right.append(h("p", { class: "muted call-figures" }, [
      call.usage ? num(u.input_tokens || 0) + " in + " + num(u.output_tokens || 0) + " out tokens" : null,
      call.cost_usd !== null && call.cost_usd !== undefined ? cost(call.cost_usd) : null,
      call.latency_ms !== null && call.latency_ms !== undefined ? took(call.latency_ms) : null,
    ].filter(Boolean).join(" · ")));
    const raw = h("details", { class: "raw" }, h("summary", {}, "The stored record"), detailView(record));
    return h("div", { class: "detail call", "data-call": call.index }, h("div", { class: "call-grid" }, left, right), raw);
  }
  const callerText = (caller) => caller || "lead_agent";

  // -- two runs compared ----------------------------------------------------------------------------
  async function compareView(threadId, a, b, token) {
    setCrumbs([["threads", "#/"], [threadId, "#/t/" + enc(threadId)], ["compare", null]]);
    if (!a || !b) throw new Error("choose two runs to compare (?a=RUN&b=RUN)");
    const c = await api("threads/" + enc(threadId) + "/compare", { a, b });
    if (token !== view) return;
    const runLink = (run) => h("a", { class: "mono", href: "#/t/" + enc(threadId) + "/r/" + enc(run) }, run);
    const delta = (value, fmt) => (value === null || value === undefined ? "–" : value === 0 ? "=" :
      (value > 0 ? "+" : "−") + fmt(Math.abs(value)));
    const figures = [["status", (s) => pill(s.status), null], ["steps", (s) => num(s.steps), null],
      ["model calls", (s) => num(s.model_calls), (d) => delta(d.model_calls, num)],
      ["tool calls", (s) => num(s.tool_calls), (d) => delta(d.tool_calls, num)],
      ["tokens", (s) => num(s.total_tokens), (d) => delta(d.total_tokens, num)],
      ["cost", (s) => cost(s.cost_usd), (d) => delta(d.cost_usd, cost)],
      ["duration", (s) => took(s.duration_ms), (d) => delta(d.duration_ms, took)]];
    const sides = h("table", { id: "compare-sides" },
      h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, "A ", runLink(c.a.run_id)), h("th", {}, "B ", runLink(c.b.run_id)),
        h("th", { class: "num" }, "B − A"))),
      h("tbody", {}, figures.map(([name, show, change]) => h("tr", { "data-figure": name }, h("th", {}, name),
        h("td", {}, show(c.a)), h("td", {}, show(c.b)), h("td", { class: "num" }, change ? change(c.deltas) : "")))));
    const diverged = c.divergence ? c.divergence.step : null;
    const seqLink = (run, seq) => (seq === null ? h("span", { class: "muted" }, "—") :
      h("a", { class: "mono", href: "#/t/" + enc(threadId) + "/r/" + enc(run) + (seq > 1 ? "?after=" + (seq - 1) : "") }, "#" + seq));
    const steps = c.steps.map((pair) => {
      const only = pair.a === null ? "only-b" : pair.b === null ? "only-a" : pair.differences.length ? "differs" : "same";
      return h("tr", { class: "step-" + only + (pair.position === diverged ? " diverged" : ""), "data-position": pair.position },
        h("td", { class: "num" }, pair.position), h("td", {}, callerTag(pair.caller)), h("td", {}, pair.label),
        h("td", {}, seqLink(c.a.run_id, pair.a_seq)), h("td", {}, seqLink(c.b.run_id, pair.b_seq)),
        h("td", {}, only === "only-a" ? "only in A" : only === "only-b" ? "only in B" : only === "same" ? "same" :
          pair.differences.map((d) => h("div", { class: "difference" }, h("b", {}, d.field + ": "),
            h("span", { class: "a" }, d.a), " → ", h("span", { class: "b" }, d.b)))));
    });
    const others = c.differences.map((d) => h("li", {}, h("b", {}, d.field + ": "), h("span", { class: "a" }, d.a), " → ",
      h("span", { class: "b" }, d.b)));
    fill(main,
      h("h1", {}, "Compare ", runLink(c.a.run_id), h("span", { class: "muted" }, "with"), runLink(c.b.run_id)),
      h("div", { class: "panel" }, h("p", { id: "compare-summary", class: c.same ? "same" : "diverged-summary" },
        c.same ? "" : "First divergence: ", c.summary), sides),
      h("div", { class: "panel" }, h("h2", {}, "Steps, aligned"),
        h("table", { id: "compare-steps" }, h("thead", {}, h("tr", {}, ["#", "caller", "step", "A", "B", "difference"].map(
          (name, i) => h("th", { class: i === 0 ? "num" : null }, name)))), h("tbody", {}, steps)),
        others.length ? [h("h2", {}, "The runs' other differences"), h("ul", { id: "compare-run-fields" }, others)] : null));
  }

  // -- scores ---------------------------------------------------------------------------------------
  function scoreValue(value) {
    if (value === true) return "pass";
    if (value === false) return "fail";
    if (value === "up") return "▲ up";
    if (value === "down") return "▼ down";
    return String(value);
  }
  function scoreItem(seq, c) {
    const good = c.value === true || c.value === "up" || (typeof c.value === "number" && c.value > 0);
    const bad = c.value === false || c.value === "down";
    return h("li", { "data-seq": seq, "data-name": c.name },
      h("span", { class: "score-name mono" }, c.name), " ",
      h("span", { class: "pill " + (good ? "st-success" : bad ? "st-error" : "") }, scoreValue(c.value)), " ",
      h("span", { class: "muted" }, c.source || ""), c.comment ? [" ", h("q", {}, c.comment)] : null);
  }
  // Feedback is written only by a server that runs with a token: one that asked this tab for its token.
  const canWrite = () => sessionStorage.getItem("run-journal-token") !== null;
  function scoresPanel(state, found) {
    const list = h("ul", { class: "scores", id: "scores" }, found.data.map((e) => scoreItem(e.seq, e.content || {})));
    if (!found.data.length && !canWrite()) return null;
    return h("div", { class: "panel", id: "scores-panel" }, h("h2", {}, "Scores"), list,
      canWrite() ? feedbackForm(state, list) : null);
  }
  function feedbackForm(state, list) {
    const comment = h("input", { name: "comment", "aria-label": "comment", placeholder: "a comment (optional)", maxlength: "2000" });
    const said = h("span", { class: "muted", id: "feedback-said", role: "status" });
    const give = async (value, button) => {
      for (const b of form.querySelectorAll("button")) b.disabled = true;
      said.textContent = "sending…";
      try {
        const score = await api(state.base + "/feedback", null, { value, comment: comment.value || null });
        list.append(scoreItem(score.seq, score));
        comment.value = "";
        said.textContent = "Thanks: recorded as " + score.name + " = " + scoreValue(score.value) + ".";
      } catch (error) {
        said.textContent = error instanceof HttpError && error.status === 403
          ? "This server takes no feedback (it runs without a token)." : "Not recorded: " + error.message;
      } finally {
        for (const b of form.querySelectorAll("button")) b.disabled = false;
        button.blur();
      }
    };
    const up = h("button", { type: "button", class: "thumb up", "data-value": "up", title: "thumbs up" }, "▲ Good");
    const down = h("button", { type: "button", class: "thumb down", "data-value": "down", title: "thumbs down" }, "▼ Bad");
    up.addEventListener("click", () => give("up", up));
    down.addEventListener("click", () => give("down", down));
    const form = h("form", { class: "feedback", id: "feedback", onsubmit: (event) => event.preventDefault() },
      h("span", {}, "Your feedback:"), up, down, comment, said);
    return form;
  }

  // -- subagent task cards --------------------------------------------------------------------------
  function taskCard(state, taskId, firstEvent) {
    const status = h("span", {}, pill("running"));
    const steps = h("div", { class: "steps" });
    const more = h("button", { type: "button", class: "more-steps" }, "More steps");
    more.hidden = true;
    const name = field(firstEvent.content, "subagent", "") || String(field(firstEvent.metadata, "caller", "")).replace(/^subagent:/, "");
    const header = h("header", {}, h("b", {}, "subagent"), callerTag("subagent:" + name), h("span", { class: "mono muted" }, taskId), status,
      h("span", { class: "description" }, ""));
    const card = h("section", { class: "task", "data-task": taskId }, header, steps, more);
    let cursor = 0;
    const loadSteps = async () => {
      more.disabled = true;
      const page = await api(state.base + "/events", { task_id: taskId, event_types: "subagent.step", limit: STEPS, after_seq: cursor });
      if (state.token !== view) return;
      for (const step of page.data) {
        steps.append(h("div", { class: "step", "data-seq": step.seq },
          h("span", { class: "idx" }, "#" + field(step.content, "message_index")),
          h("span", { class: "kind" }, field(step.content, "kind") + (field(step.content, "tool_name") ? " " + step.content.tool_name : "")),
          h("span", { class: "text" }, oneLine(field(step.content, "text"), 600))));
      }
      if (page.data.length) cursor = page.data[page.data.length - 1].seq;
      more.hidden = !page.has_more;
      more.disabled = false;
    };
    more.addEventListener("click", loadSteps);
    (async () => {
      const ends = await api(state.base + "/events", { task_id: taskId, event_types: "subagent.start,subagent.end", limit: 10 });
      if (state.token !== view) return;
      for (const e of ends.data) {
        if (e.event_type === "subagent.start") header.querySelector(".description").textContent = oneLine(field(e.content, "description"), 160);
        if (e.event_type === "subagent.end") {
          const result = field(e.content, "result") || field(e.content, "error") || "";
          fill(status, pill(field(e.content, "status", "ended")));
          card.append(h("div", { class: "steps result" }, h("b", {}, "result: "), oneLine(result, 600)));
        }
      }
      await loadSteps();
    })().catch(showError);
    return card;
  }

  // -- workspace changes ----------------------------------------------------------------------------
  function workspacePanel(review) {
    const panel = h("div", { class: "panel", id: "workspace" }, h("h2", {}, "Workspace changes"));
    if (!review.available) { panel.append(h("p", { class: "muted" }, "This run changed no files.")); return panel; }
    const changes = review.workspace_changes || {};
    const s = changes.summary || {};
    panel.append(h("p", {}, review.summary_text || "", " ",
      h("span", { class: "muted" }, "(" + [s.created + " created", s.modified + " modified", s.deleted + " deleted"].join(", ") + ")")));
    for (const f of changes.files || []) {
      const flags = ["sensitive", "binary", "truncated", "symlink"].filter((k) => f[k]);
      const body = f.diff ? diffView(f.diff) : h("p", { class: "muted diff" }, h("div", {},
        f.sensitive ? "content not recorded (sensitive file)" : f.binary ? "binary file" : "no diff"));
      const header = h("header", {}, pill(f.status), h("span", { class: "path" }, f.path),
        h("span", { class: "adds" }, "+" + (f.additions || 0)), h("span", { class: "dels" }, "−" + (f.deletions || 0)),
        ...flags.map((k) => pill(k, "st-" + k)));
      header.addEventListener("click", () => { body.hidden = !body.hidden; });
      panel.append(h("div", { class: "file", "data-path": f.path }, header, body));
    }
    return panel;
  }
  function diffView(text) {
    const pre = h("pre", { class: "diff" });
    for (const line of text.replace(/\n$/, "").split("\n")) {
      const cls = line.startsWith("+++") || line.startsWith("---") ? "meta" : line.startsWith("+") ? "add"
        : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : null;
      pre.append(h("div", { class: cls }, line || " "));
    }
    return pre;
  }

  // -- live follow (server-sent events read with fetch, so the token goes in a header) -------------
  function followRun(state) {
    const controller = new AbortController();
    stopLive = () => controller.abort();
    state.nodes.live.className = "live";
    state.nodes.live.textContent = "live";
    const events = state.page.data;
    let cursor = events.length ? events[events.length - 1].seq : state.after;
    const onEvent = (e) => {
      if (state.token !== view) return;
      if (state.page.has_more) return;                 // a later page is not on screen
      if (state.page.data.length >= PAGE) { state.page.has_more = true; state.page.next_after_seq = cursor; }
      else state.page.data.push(e);
      drawTimeline(state);
      if (TERMINAL.has(e.event_type)) finish();
    };
    const finish = async () => {
      state.nodes.live.className = "";
      state.nodes.live.textContent = "";
      try {
        const [run, review] = await Promise.all([api(state.base), api(state.base + "/workspace-changes")]);
        if (state.token !== view) return;
        state.run = run;
        fillStats(state);
        if (run.status === "error") await showRunError(state);
        document.getElementById("usage").replaceChildren(h("h2", {}, "Token usage"),
          usageChart({ by_model: run.usage_by_model, by_caller: run.usage_by_caller }));
        document.getElementById("workspace").replaceWith(workspacePanel(review));
      } catch (error) { showError(error); }
    };
    (async () => {
      while (!controller.signal.aborted) {
        try {
          const url = "api/threads/" + enc(state.threadId) + "/events/stream?run_id=" + enc(state.runId);
          const response = await fetch(url, { headers: headers({ "Last-Event-ID": String(cursor), Accept: "text/event-stream" }),
            signal: controller.signal });
          if (response.status === 204) { await finish(); return; }
          if (!response.ok) throw new HttpError(response.status, null);
          const reader = response.body.getReader();
          const decoder = new TextDecoder();
          let buffer = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buffer += decoder.decode(value, { stream: true });
            let cut;
            while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
              const block = buffer.slice(0, cut);
              buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
              let data = null;
              for (const line of block.split(/\r?\n/)) {
                if (line.startsWith("data:")) data = (data === null ? "" : data + "\n") + line.slice(5).replace(/^ /, "");
              }
              if (data === null) continue;
              const e = JSON.parse(data);
              cursor = e.seq;
              onEvent(e);
              if (TERMINAL.has(e.event_type)) return;
            }
          }
        } catch (error) {
          if (controller.signal.aborted) return;
          if (error instanceof HttpError && error.status === 401) { showError(error); return; }
        }
        await new Promise((resolve) => setTimeout(resolve, 1000));   // reconnect, resuming at cursor
      }
    })();
  }

  window.addEventListener("hashchange", render);
  render();
})();
