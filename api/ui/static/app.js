// Memory Agent dashboard: plain DOM + fetch against this server's JSON API (docs/dashboard.md).
// The key typed at login is kept in sessionStorage (this tab only) and sent as X-API-Key or
// X-Admin-Key; the server decides what each key may read or change, this page only reflects it.
"use strict";

const main = document.getElementById("main");
const STORE = "memory-agent-dashboard";

// ---------- small helpers ----------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "—");
const fmtNum = (n, d = 3) => (typeof n === "number" ? (Number.isInteger(n) ? String(n) : n.toFixed(d)) : n ?? "—");
function ago(t) {
  if (!t) return "—";
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}
function seqRange(start, end) { return end - start <= 1 ? `message ${start}` : `messages ${start}–${end - 1}`; }  // [start, end)
function badge(text, tone) { return h("span", { class: `badge ${tone || ""}` }, text); }
function statusTone(s) { return { completed: "ok", failed: "bad", processing: "warn" }[s] || ""; }
function field(label, input) {
  input.id = input.id || `f-${label.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input);
}
function table(caption, headers, rows, attrs) {
  return h("table", attrs || {}, caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, x.label ?? x)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "Nothing yet."))));
}
function put(el, ...kids) {  // replaceChildren, skipping null/false (absent parts of a page)
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
}
function alertBox(text) { return h("div", { class: "alert", role: "alert" }, text); }
function announce(text) { document.getElementById("status").textContent = text; }

// ---------- session and API ----------
function session() { try { return JSON.parse(sessionStorage.getItem(STORE)); } catch { return null; } }
class ApiError extends Error {
  constructor(status, detail) { super(`${status}: ${detail}`); this.status = status; this.detail = detail; }
}
async function api(path, { method = "GET", body, params } = {}) {
  const s = session();
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
  const headers = { Accept: "application/json" };
  if (s) headers[s.kind === "admin" ? "X-Admin-Key" : "X-API-Key"] = s.key;
  if (s && s.actingUser && s.kind === "api" && !s.user) headers["X-User-Id"] = s.actingUser;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok) {
    let detail = data && data.detail !== undefined ? data.detail : text;
    if (typeof detail !== "string") detail = JSON.stringify(detail);
    if (r.status === 401 && s) { sessionStorage.removeItem(STORE); }
    throw new ApiError(r.status, detail || r.statusText);
  }
  return data;
}
function explain(err) {
  if (err instanceof ApiError) {
    if (err.status === 404 && err.detail === "Not Found") return "This server does not offer that endpoint.";
    const what = { 401: "Not signed in or unknown key", 403: "Refused by the server", 404: "Not found",
                   409: "Conflict", 422: "Invalid input", 429: "Too many requests", 503: "Unavailable" }[err.status];
    return `${what || "Error"} (${err.status}): ${err.detail}`;
  }
  return `Could not reach the server: ${err.message}`;
}
const may = {
  any: (s) => !!s,
  // Search and facts act as a user: a key bound to one, or a service key granted act_as any_user.
  user: (s) => s && s.kind === "api" && s.may_act_as_user,
  // Stats are per tenant: an admin (picking the tenant) or a service key, not a key bound to a user.
  tenant: (s) => s && (s.kind === "admin" || !s.user),
  admin: (s) => s && s.kind === "admin",
};

// ---------- pages ----------
function page(title, ...content) {
  put(main, h("h1", {}, title), ...content);
  document.title = `${title} · Memory Agent`;
  main.focus();
}
function loading() { return h("p", { class: "muted" }, "Loading…"); }

function loginPage(message) {
  const key = h("input", { id: "login-key", type: "password", name: "key", autocomplete: "current-password", required: true,
                           "aria-describedby": "login-help" });
  const out = h("div", {});
  const form = h("form", { class: "login", "aria-labelledby": "login-title", onsubmit: async (e) => {
    e.preventDefault();
    put(out);
    const value = key.value.trim();
    for (const kind of ["api", "admin"]) {
      sessionStorage.setItem(STORE, JSON.stringify({ key: value, kind }));
      try {
        const who = await api("/v1/ui/session");
        sessionStorage.setItem(STORE, JSON.stringify({ key: value, ...who }));
        location.hash = "#/conversations";
        render();
        return;
      } catch (err) {
        sessionStorage.removeItem(STORE);
        if (!(err instanceof ApiError && err.status === 401)) { put(out, alertBox(explain(err))); return; }
      }
    }
    put(out, alertBox("Unknown key: neither an API key nor an admin key of this server."));
    key.focus();
  } },
    h("h1", { id: "login-title" }, "Sign in"),
    message ? h("p", { class: "note" }, message) : null,
    h("div", { class: "field" }, h("label", { for: "login-key" }, "API key or admin key"), key,
      h("small", { id: "login-help", class: "muted" }, "An API key shows its own tenant; an admin key every tenant. ",
        "It is kept in this tab only (sessionStorage).")),
    h("button", { type: "submit" }, "Sign in"), out);
  put(main, form);
  document.title = "Sign in · Memory Agent";
  key.focus();
}

async function conversationsPage(params) {
  const s = session();
  const q = h("input", { type: "search", name: "q", value: params.get("q") || "" });
  const results = h("div", {}, loading());
  const openId = h("input", { name: "conversation_id", required: true, pattern: "[A-Za-z0-9][A-Za-z0-9._:@-]*" });
  const openTenant = h("input", { name: "tenant", required: true });
  page("Conversations", s.kind === "admin" ? tenantPicker(params, "#/conversations") : null,
    h("form", { class: "row", role: "search", onsubmit: (e) => {
      e.preventDefault();
      const p = new URLSearchParams({ q: q.value });
      if (s.kind === "admin" && params.get("tenant")) p.set("tenant", params.get("tenant"));
      location.hash = `#/conversations?${p}`;
    } }, field("Search conversations", q), h("button", { type: "submit" }, "Search")),
    results,
    h("h2", {}, "Open a conversation by id"),
    h("form", { class: "row", onsubmit: (e) => {
      e.preventDefault();
      const t = s.kind === "admin" ? openTenant.value : s.tenant;
      location.hash = `#/conversation/${encodeURIComponent(t)}/${encodeURIComponent(openId.value)}`;
    } }, s.kind === "admin" ? field("Conversation tenant", openTenant) : null, field("Conversation id", openId),
      h("button", { type: "submit", class: "secondary" }, "Open")));
  try {
    if (s.kind === "admin" && !params.get("tenant")) {
      put(results, h("p", { class: "note" }, "Choose a tenant to list its conversations."));
      return;
    }
    const data = await api(s.kind === "admin" ? "/v1/ui/conversations" : "/v1/conversations",
                           { params: { q: params.get("q"), tenant: params.get("tenant"), limit: 50, offset: params.get("offset") || 0 } });
    const list = data.conversations;
    const rows = list.map((c) => {
      const t = c.tenant_id || s.tenant || params.get("tenant");
      return h("tr", {},
        h("td", {}, h("a", { href: `#/conversation/${encodeURIComponent(t)}/${encodeURIComponent(c.conversation_id)}` },
          c.conversation_id)),
        h("td", {}, c.user_id), h("td", {}, c.subject_id || "—"),
        h("td", { class: "num" }, fmtNum(c.message_count), c.gap_count ? h("div", { class: "muted" }, `${c.gap_count} gaps`) : null),
        h("td", { class: "num" }, `${c.summaries} / ${c.chunks} / ${c.facts} / ${c.topics}`),
        h("td", {}, h("time", { datetime: c.last_message_at || "" }, ago(c.last_message_at))),
        h("td", { class: "num" }, c.summary_lag ? badge(`${c.summary_lag} unsummarized`, "warn") : badge("0", "ok")));
    });
    const shown = data.offset + list.length;
    const more = shown < data.total;
    const page_ = (offset) => { const p = new URLSearchParams(params); p.set("offset", offset); return `#/conversations?${p}`; };
    put(results, table(`${data.total} conversation${data.total === 1 ? "" : "s"}` + (data.total ? `, ${data.offset + 1}–${shown} shown` : ""),
      ["Conversation", "User", "Subject", { label: "Messages", num: true },
       { label: "Summaries / chunks / facts / topics", num: true }, "Last activity", { label: "Lag (messages after the newest summary)", num: true }],
      rows, { "aria-label": "Conversations" }),
      h("p", {}, data.offset > 0 ? h("a", { href: page_(Math.max(0, data.offset - data.limit)) }, "Previous page") : null, " ",
        more ? h("a", { href: page_(shown) }, "Next page") : null));
  } catch (err) {
    put(results, alertBox(explain(err)));
  }
}

async function conversationPage(tenant, id) {
  const s = session();
  // Filled in once the data arrives: a page left meanwhile keeps the new one (this div is detached).
  const body = h("div", {}, loading());
  page(`Conversation ${id}`, body);
  let c;
  try {
    c = await api(`/v1/ui/conversations/${encodeURIComponent(id)}`, { params: s.kind === "admin" ? { tenant } : {} });
  } catch (err) {
    put(body, alertBox(explain(err)));
    return;
  }
  const summaryItems = c.summaries.map((m) => h("li", { class: m.status },
    h("strong", {}, `Messages ${m.start_seq}–${m.end_seq}`), " ", badge(m.status, statusTone(m.status)),
    m.attempt > 1 ? h("span", { class: "muted" }, ` attempt ${m.attempt}`) : null,
    h("div", { class: "muted" }, `#${m.memory_id}`, m.base_memory_id ? ` extends #${m.base_memory_id}` : " (first)",
      ` · ${m.model} · prompt ${m.prompt_version} · created ${fmtTime(m.created_at)}`,
      m.completed_at ? ` · completed ${fmtTime(m.completed_at)}` : "",
      m.generation_time_ms !== null ? ` · generated in ${(m.generation_time_ms / 1000).toFixed(2)} s` : ""),
    m.text ? h("p", {}, m.text) : null,
    m.error ? h("p", { class: "alert" }, `Failed: ${m.error}`) : null));
  put(body,
    h("dl", { class: "facts" },
      h("dt", {}, "Tenant"), h("dd", {}, c.conversation.tenant_id), h("dt", {}, "User"), h("dd", {}, c.conversation.user_id),
      h("dt", {}, "Subject"), h("dd", {}, c.conversation.subject_id || "—"),
      h("dt", {}, "Messages"), h("dd", {}, `${c.conversation.message_count} (last seq ${c.conversation.last_seq}, ${c.conversation.gap_count} gaps)`),
      h("dt", {}, "Summaries"), h("dd", {}, `${c.summaries.length} version${c.summaries.length === 1 ? "" : "s"}`,
        ["completed", "processing", "failed"].map((st) => {
          const n = c.summaries.filter((m) => m.status === st).length;
          return n ? [" ", badge(`${n} ${st}`, statusTone(st))] : null;
        }))),
    h("h2", { id: "summaries" }, "Summary chain"),
    c.summaries.length ? h("ol", { class: "timeline", "aria-labelledby": "summaries" }, summaryItems)
      : h("p", { class: "muted" }, "No summary yet."),
    h("h2", {}, "Topics"),
    table(c.active_topic_id ? `Active topic: ${c.active_topic_id} (as of seq ${c.topics_as_of_seq})` : "No active topic",
      ["Topic", "State", { label: "Priority", num: true }, "Memory", { label: "Half-life (d)", num: true },
       { label: "Messages (active / archived)", num: true }, "Archive", "Last active"],
      c.topics.map((t) => h("tr", {},
        h("td", {}, t.topic_title, h("div", { class: "muted" }, t.topic_id)),
        h("td", {}, t.active ? badge("active", "ok") : t.evicted ? badge("evicted", "bad") : badge("idle"),
          t.evicted_reason ? h("div", { class: "muted" }, t.evicted_reason) : null),
        h("td", { class: "num" }, fmtNum(t.priority)),
        h("td", {}, `${t.memory_type} (${t.consolidation_stage})`), h("td", { class: "num" }, fmtNum(t.half_life_days, 1)),
        h("td", { class: "num" }, `${t.active_messages} / ${t.compressed_messages}`),
        h("td", {}, t.archive_gzip_bytes ? `archived: ${t.compressed_messages} messages, ${t.archive_gzip_bytes} B gzip` : "not archived",
          t.compaction_status ? h("div", { class: "muted" }, `compaction ${t.compaction_status} (${t.compactions}×)`) : null,
          t.restored_at_seq !== null && t.restored_at_seq !== undefined ? h("div", {}, badge(`restored at seq ${t.restored_at_seq}`, "warn")) : null),
        h("td", {}, ago(t.last_active_at))))),
    h("h2", {}, "Facts from this conversation"),
    table(null, ["Fact", "Category", "Owner", "Visibility", "State"],
      c.facts.map((f) => h("tr", {}, h("td", {}, f.content), h("td", {}, f.category), h("td", {}, f.owner_user_id),
        h("td", {}, f.visibility), h("td", {}, f.valid_to ? badge("superseded", "warn") : badge("current", "ok"))))),
    h("h2", {}, "Chunks"),
    table(null, ["Messages", "Content", "Model", "Created"],
      c.chunks.map((k) => h("tr", {}, h("td", {}, `${k.message_range_start}–${k.message_range_end - 1}`),
        h("td", {}, k.content), h("td", {}, `${k.model} · ${k.prompt_version}`), h("td", {}, fmtTime(k.created_at))))),
    h("h2", {}, "Messages"),
    table(c.messages.length < c.conversation.message_count ? `The newest ${c.messages.length} of ${c.conversation.message_count}` : null,
      [{ label: "Seq", num: true }, "Role", "Content", "Time"],
      c.messages.map((m) => h("tr", {}, h("td", { class: "num" }, m.seq), h("td", {}, m.role), h("td", {}, m.content),
        h("td", {}, fmtTime(m.occurred_at))))));
}

function scoreCells(score) {
  if (!score) return [h("td", { colspan: 6, class: "muted" }, "not scored")];
  return [h("td", { class: "num" }, fmtNum(score.final)), h("td", { class: "num" }, fmtNum(score.similarity)),
    h("td", { class: "num" }, fmtNum(score.cosine)), h("td", { class: "num" }, fmtNum(score.keyword_score)),
    h("td", { class: "num" }, `${fmtNum(score.importance_weight)} / ${fmtNum(score.recency_weight)}`),
    h("td", {}, (score.found_by || []).join(", "))];
}
const SCORE_HEADERS = [{ label: "Final", num: true }, { label: "Similarity", num: true }, { label: "Cosine", num: true },
  { label: "Keyword", num: true }, { label: "Importance / recency weight", num: true }, "Found by"];
const REASONS = { below_threshold: "score below the threshold", already_surfaced: "already shown in this conversation",
                  over_budget: "did not fit the token budget" };

async function searchPage(params) {
  const s = session();
  const q = h("input", { type: "search", name: "q", required: true, value: params.get("q") || "" });
  const user = h("input", { name: "user_id", value: params.get("user_id") || s.actingUser || "" });
  const subject = h("input", { name: "subject_id", value: params.get("subject_id") || "" });
  const since = h("input", { type: "datetime-local", name: "since", value: params.get("since") || "" });
  const until = h("input", { type: "datetime-local", name: "until", value: params.get("until") || "" });
  const k = h("input", { type: "number", name: "k", min: 1, max: 50, value: params.get("k") || 10 });
  const chosen = (params.get("kinds") || "fact,chunk,message").split(",");
  const kinds = ["fact", "chunk", "message"].map((kind) => h("input", { type: "checkbox", id: `kind-${kind}`, value: kind,
                                                                         checked: chosen.includes(kind) }));
  const results = h("div", {});
  page("Memory search",
    h("form", { class: "row", role: "search", onsubmit: (e) => {
      e.preventDefault();
      const p = new URLSearchParams({ q: q.value, k: k.value,
        kinds: kinds.filter((x) => x.checked).map((x) => x.value).join(",") });
      for (const [name, el] of [["user_id", user], ["subject_id", subject], ["since", since], ["until", until]]) {
        if (el.value) p.set(name, el.value);
      }
      location.hash = `#/search?${p}`;
    } }, field("Search memory", q), s.user ? null : field("User id", user), field("Subject id", subject),
      h("fieldset", {}, h("legend", {}, "Kinds"), kinds.map((x) => h("label", { for: x.id }, x, ` ${x.value}s`))),
      field("Since (UTC)", since), field("Until (UTC)", until), field("Results (k)", k), h("button", { type: "submit" }, "Search")),
    results);
  if (!params.get("q")) { q.focus(); return; }
  put(results, loading());
  try {
    const data = await api("/v1/search", { params: Object.fromEntries(params) });
    const items = data.items;
    const excluded = data.excluded;
    put(results,
      h("h2", {}, `${items.length} result${items.length === 1 ? "" : "s"}`),
      data.error ? alertBox(data.error) : null,
      h("p", { class: "muted" }, `${data.matched} above the threshold ${fmtNum(data.threshold)} of ${data.candidates} candidates`,
        ` · user ${data.user_id} · subjects ${data.subjects_searched.map((x) => x ?? "(none)").join(", ") || "—"} · ${data.embedding_model}`),
      table(null, ["Kind", "Content", ...SCORE_HEADERS, "Source"],
        items.map((it) => h("tr", {}, h("td", {}, it.kind), h("td", {}, it.content), scoreCells(it.score),
          h("td", {}, it.conversation_id ? h("a", { href: `#/conversation/${encodeURIComponent(s.tenant)}/${encodeURIComponent(it.conversation_id)}` },
            it.conversation_id) : (it.owner_user_id ? `owner ${it.owner_user_id}` : "—"),
            it.message_range ? ` (${seqRange(it.message_range[0], it.message_range[1])})` : ""))),
        { "aria-label": "Search results" }),
      h("h2", {}, `Excluded (${data.excluded_total ?? excluded.length})`),
      table(null, ["Kind", "Id", "Why excluded", ...SCORE_HEADERS],
        excluded.map((x) => h("tr", {}, h("td", {}, x.kind), h("td", {}, x.id), h("td", {}, REASONS[x.reason] || x.reason),
          scoreCells(x.score))), { "aria-label": "Excluded items" }));
    announce(`${items.length} results`);
  } catch (err) {
    put(results, alertBox(explain(err)));
  }
}

async function factsPage(params) {
  const s = session();
  const user = h("input", { name: "user_id", required: true, value: params.get("user_id") || s.actingUser || "" });
  const subject = h("input", { name: "subject_id", value: params.get("subject_id") || "" });
  const results = h("div", {});
  const feedback = h("div", { "aria-live": "polite" });
  page("Facts",
    h("p", { class: "muted" }, "Owners edit, share, unshare and delete their facts; facts others shared are read only (seed 003)."),
    h("form", { class: "row", onsubmit: (e) => {
      e.preventDefault();
      if (!s.user) { s.actingUser = user.value; sessionStorage.setItem(STORE, JSON.stringify(s)); }
      const p = new URLSearchParams();
      if (!s.user) p.set("user_id", user.value);
      if (subject.value) p.set("subject_id", subject.value);
      location.hash = `#/facts?${p}`;
    } }, s.user ? h("p", {}, `Acting as ${s.user}`) : field("Acting user", user), field("Subject id (empty: all)", subject),
      h("button", { type: "submit" }, "Show facts")),
    feedback, results);
  const acting = s.user || params.get("user_id");
  if (!acting) { user.focus(); return; }
  if (!s.user && s.actingUser !== acting) { s.actingUser = acting; sessionStorage.setItem(STORE, JSON.stringify(s)); }
  put(results, loading());
  const act = async (label, method, path, body) => {
    put(feedback);
    try {
      await api(path, { method, body, params: { wait: "true", wait_ms: 10000 } });
      await load();
      const done = h("p", { class: "note", role: "status", tabindex: -1 }, `${label}: done.`);
      put(feedback, done);
      done.focus();  // the row's buttons were re-rendered: keep the keyboard user's place near them
    } catch (err) {
      put(feedback, alertBox(`${label}: ${explain(err)}`));
      await load().catch(() => {});  // show the facts as they are now (the refused one may be gone)
    }
  };
  const load = async () => {
    const data = await api("/v1/facts", { params: { subject_id: params.get("subject_id") } });
    put(results, table(`${data.facts.length} facts visible to ${data.user_id}`,
      ["Fact", "Category", "Owner", "Visibility", "Source", "Actions"],
      data.facts.map((f) => {
        const id = f.fact_id;
        const actions = f.mine ? [
          h("button", { type: "button", class: "secondary", "aria-label": `Edit fact: ${f.content}`, onclick: (e) => {
            const text = h("textarea", { id: `edit-${id}`, name: "content", required: true, maxlength: 4000 }, f.content);
            const form = h("form", { onsubmit: (ev) => { ev.preventDefault(); act("Edit", "PATCH", `/v1/facts/${id}`, { content: text.value }); } },
              h("label", { for: `edit-${id}` }, "New wording"), text, " ",
              h("button", { type: "submit" }, "Save"), " ",
              h("button", { type: "button", class: "secondary", onclick: () => load() }, "Cancel"));
            put(e.target.closest("td"), form);
            text.focus();
            text.setSelectionRange(text.value.length, text.value.length);  // type on from the end
          } }, "Edit"), " ",
          h("button", { type: "button", class: "secondary", "aria-label": `${f.visibility === "shared" ? "Unshare" : "Share"} fact: ${f.content}`,
            onclick: () => act(f.visibility === "shared" ? "Unshare" : "Share", "PATCH", `/v1/facts/${id}/visibility`,
              { visibility: f.visibility === "shared" ? "private" : "shared" }) }, f.visibility === "shared" ? "Unshare" : "Share"), " ",
          h("button", { type: "button", class: "danger", "aria-label": `Delete fact: ${f.content}`, onclick: () => {
            if (confirm(`Delete this fact?\n\n${f.content}`)) act("Delete", "DELETE", `/v1/facts/${id}`);
          } }, "Delete"),
        ] : [h("span", { class: "muted" }, `shared by ${f.owner_user_id}: read only`)];
        return h("tr", { "data-fact-id": id }, h("td", {}, f.content, f.valid_to ? [" ", badge("superseded", "warn")] : null),
          h("td", {}, f.category), h("td", {}, f.mine ? "me" : f.owner_user_id),
          h("td", {}, f.visibility === "shared" ? badge("shared", "ok") : badge("private")),
          h("td", {}, f.source_conversation_id ? h("a", { href: `#/conversation/${encodeURIComponent(s.tenant)}/${encodeURIComponent(f.source_conversation_id)}` },
            f.source_conversation_id) : "—"), h("td", {}, actions));
      })));
  };
  try { await load(); } catch (err) { put(results, alertBox(explain(err))); }
}

async function generationsPage(params) {
  const results = h("div", {}, loading());
  const diffOut = h("div", {});
  const a = h("select", { name: "a", required: true });
  const b = h("select", { name: "b", required: true });
  const judged = h("div", {});  // judge.js: the last judgement beside the gated activate button
  page("Generations", results, h("h2", {}, "Compare two generations"),
    h("form", { class: "row", onsubmit: (e) => {
      e.preventDefault();
      location.hash = `#/generations?${new URLSearchParams({ a: a.value, b: b.value })}`;
    } }, field("From generation", a), field("To generation", b), h("button", { type: "submit" }, "Diff")), diffOut,
    judged);
  let gens;
  try { gens = await api("/v1/admin/generations"); } catch (err) { put(results, alertBox(explain(err))); return; }
  for (const sel of [a, b]) put(sel, ...gens.map((g) => h("option", { value: g.name }, g.name)));
  if (params.get("a")) a.value = params.get("a");
  if (params.get("b")) b.value = params.get("b"); else if (gens.length > 1) b.value = gens[1].name;
  if (gens.length > 1) {
    const jp = judgePanel(() => a.value, () => b.value);
    put(judged, jp.panel);
    for (const sel of [a, b]) sel.addEventListener("change", jp.refresh);
  }
  put(results, table(null, ["Generation", "Status", "Replay progress", "Derived records", "LLM cache", "Created"],
    gens.map((g) => {
      const p = g.progress || {};
      const pct = p.total ? Math.round((100 * p.processed) / p.total) : 100;
      const cache = Object.entries(g.llm_cache || {}).map(([k, v]) => `${k}: ${v.calls} calls, ${v.hits} cache hits`);
      return h("tr", { "data-generation": g.name }, h("td", {}, g.name),
        h("td", {}, badge(g.status, g.status === "active" ? "ok" : "")),
        h("td", {}, h("progress", { max: p.total || 1, value: p.total ? p.processed : 1, "aria-label": `Replay progress of ${g.name}` }),
          ` ${p.processed ?? 0} / ${p.total ?? 0} events (${pct}%) `, p.caught_up ? badge("caught up", "ok") : badge("behind the log", "warn")),
        h("td", {}, `${p.derived_projected ?? 0} / ${p.derived_total ?? 0}`),
        h("td", {}, cache.length ? cache.join("; ") : "—"), h("td", {}, fmtTime(g.created_at)));
    })));
  if (!params.get("a") || !params.get("b")) return;
  put(diffOut, loading());
  try {
    const d = await api("/v1/ui/admin/generations/diff", { params: { a: params.get("a"), b: params.get("b") } });
    const changes = (section) => Object.entries(d[section]).map(([conv, ch]) => h("tr", {}, h("td", {}, conv),
      h("td", {}, ch.added.join(", ") || "—"), h("td", {}, ch.removed.join(", ") || "—"), h("td", {}, ch.changed.join(", ") || "—")));
    put(diffOut,
      h("h2", {}, `Diff ${d.a} → ${d.b}`),
      d.empty ? h("p", { class: "note" }, "No differences.") : null,
      h("dl", { class: "facts" }, Object.entries(d.totals).map(([k, v]) => [h("dt", {}, k.replaceAll("_", " ")), h("dd", {}, v)])),
      table("Summaries (windows)", ["Conversation", "Added", "Removed", "Changed"], changes("summaries")),
      table("Chunks (windows)", ["Conversation", "Added", "Removed", "Changed"], changes("chunks")),
      table("Facts", ["Change", "Fact", "Scope", `In ${d.a}`, `In ${d.b}`],
        Object.entries(d.facts).flatMap(([kind, list]) => list.map((f) => h("tr", {}, h("td", {}, kind), h("td", {}, f.fact_id),
          h("td", {}, f.scope), h("td", {}, f.a ? f.a.content : "—"), h("td", {}, f.b ? f.b.content : "—"))))));
  } catch (err) { put(diffOut, alertBox(explain(err))); }
}

function decodeOriginal(b64) {
  const bytes = Uint8Array.from(atob(b64 || ""), (c) => c.charCodeAt(0));
  try {
    return { text: new TextDecoder("utf-8", { fatal: true }).decode(bytes), encoding: "UTF-8 text" };
  } catch {
    const hex = [...bytes].map((x) => x.toString(16).padStart(2, "0"));
    const lines = [];
    for (let i = 0; i < hex.length; i += 16) lines.push(`${i.toString(16).padStart(6, "0")}  ${hex.slice(i, i + 16).join(" ")}`);
    return { text: lines.join("\n"), encoding: "not UTF-8: hex" };
  }
}

async function deadLettersPage(params) {
  const limit = h("input", { type: "number", name: "limit", min: 1, max: 500, value: params.get("limit") || 50 });
  const results = h("div", {}, loading());
  page("Dead letters",
    h("p", { class: "muted" }, "Records a consumer refused, with the reason and the original bytes (every tenant)."),
    h("form", { class: "row", onsubmit: (e) => { e.preventDefault(); location.hash = `#/dead-letters?limit=${limit.value}`; } },
      field("How many (newest)", limit), h("button", { type: "submit" }, "Show")), results);
  try {
    const data = await api("/v1/admin/dead-letters", { params: { limit: params.get("limit") || 50 } });
    const counts = (caption, label, obj) => table(caption, [label, { label: "Letters", num: true }],
      Object.entries(obj).sort((x, y) => y[1] - x[1]).map(([r, n]) => h("tr", {}, h("td", {}, r), h("td", { class: "num" }, n))));
    put(results,
      h("p", {}, `${data.total} letter${data.total === 1 ? "" : "s"} in ${data.topic}; the newest ${data.scanned} read back.`),
      counts("Counts by reason", "Reason", data.by_reason), counts("Counts by stage", "Stage", data.by_stage),
      table(`The newest ${data.letters.length}`, ["Reason", "Detail", "Stage", "Source record", "When", "Original bytes"],
        data.letters.map((l) => {
          const src = l.source || {};
          const original = decodeOriginal(l.original_base64);
          return h("tr", { "data-reason": l.reason }, h("td", {}, badge(l.reason, "bad")), h("td", {}, l.detail || "—"),
            h("td", {}, l.stage ?? "—"),
            h("td", {}, src.topic ? `${src.topic} [${src.partition}] @${src.offset}` : "—", l.key ? h("div", { class: "muted" }, `key ${l.key}`) : null),
            h("td", {}, fmtTime(l.dead_lettered_at || l.timestamp_ms)),
            h("td", {}, h("details", {}, h("summary", {}, `${l.original_size} bytes, ${original.encoding}`,
              l.original_truncated ? " (truncated)" : ""), h("pre", {}, original.text),
              l.original_sha256 ? h("div", { class: "muted" }, `sha256 ${l.original_sha256}`) : null)));
        }), { "aria-label": "Dead letters" }));
  } catch (err) { put(results, alertBox(explain(err))); }
}

function tenantPicker(params, hashBase) {
  // The admin key reads one tenant at a time: a <select> of the tenants that have conversations.
  const select = h("select", { name: "tenant", id: "tenant-pick", required: true });
  const form = h("form", { class: "row", onsubmit: (e) => { e.preventDefault(); location.hash = `${hashBase}?tenant=${encodeURIComponent(select.value)}`; } },
    field("Tenant", select), h("button", { type: "submit" }, "Show"));
  api("/v1/ui/admin/tenants").then((tenants) => {
    put(select, ...tenants.map((t) => h("option", { value: t.tenant_id }, `${t.tenant_id} (${t.conversations} conversations)`)));
    if (params.get("tenant")) select.value = params.get("tenant");
  }, (err) => form.append(alertBox(explain(err))));
  return form;
}

function countsTable(caption, obj, label = "Measure") {
  return table(caption, [label, { label: "Count", num: true }],
    Object.entries(obj || {}).map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k.replaceAll("_", " ")),
      h("td", { class: "num" }, v && typeof v === "object" ? JSON.stringify(v) : fmtNum(v)))), { class: "kv" });
}

async function statsPage(params) {
  const s = session();
  const tenant = s.kind === "admin" ? params.get("tenant") : s.tenant;
  const results = h("div", {}, loading());
  page("Stats", s.kind === "admin" ? tenantPicker(params, "#/stats") : null, results);
  if (!tenant) { put(results, h("p", { class: "note" }, "Choose a tenant.")); return; }
  const parts = [];
  const scope = s.kind === "admin" ? { tenant } : {};
  try {
    const st = await api(s.kind === "admin" ? "/v1/ui/stats" : "/v1/stats", { params: scope });
    const p = st.projection || {};
    const llm = Object.entries(st.llm || {}).map(([kind, v]) => h("tr", {}, h("th", { scope: "row" }, kind),
      h("td", { class: "num" }, fmtNum(v.calls)), h("td", { class: "num" }, fmtNum(v.hits)),
      h("td", { class: "num" }, v.calls + v.hits ? `${Math.round((100 * v.hits) / (v.calls + v.hits))}%` : "—")));
    parts.push(
      h("p", {}, `Tenant ${st.tenant} · generation ${st.generation}`),
      h("h2", {}, "Memory"),
      countsTable(null, { conversations: st.conversations, messages: st.messages, chunks: st.chunks, facts: st.facts,
        facts_superseded: st.facts_superseded, facts_deleted: st.facts_deleted, topics: st.topics, topics_evicted: st.topics_evicted,
        ...Object.fromEntries(Object.entries(st.summaries || {}).map(([k, v]) => [`summaries ${k}`, v])) }),
      h("h2", {}, "LLM calls and cache hits"),
      table("The serving generation, every tenant", ["Kind", { label: "LLM calls", num: true }, { label: "Cache hits", num: true }, { label: "Hit rate", num: true }], llm),
      h("h2", {}, "Lag"),
      p.error ? alertBox(`Kafka: ${p.error}`) : countsTable("Events of the log (every tenant)", {
        log_events: p.log_events, projected: p.projected, folded: p.folded, lag_events: p.lag_events,
        derived_events: p.derived_events, derived_lag: p.derived_lag }),
      h("h2", {}, "Dead letters"),
      st.dead_letters.error ? alertBox(st.dead_letters.error)
        : countsTable(`${st.dead_letters.total ?? "?"} in the topic; this tenant's among the newest: ${st.dead_letters.tenant_recent ?? "?"}`,
          st.dead_letters.by_reason, "Reason"));
  } catch (err) { parts.push(alertBox(`Stats: ${explain(err)}`)); }
  try {
    const t = await api("/v1/ui/throughput", { params: scope });
    const windows = Object.keys(t);
    const measures = Object.keys(t[windows[0]] || {});
    parts.push(h("h2", {}, "Throughput"),
      table("Rows the read model took in", ["Measure", ...windows.map((w) => ({ label: w.replaceAll("_", " "), num: true }))],
        measures.map((m) => h("tr", {}, h("th", { scope: "row" }, m.replaceAll("_", " ")),
          windows.map((w) => h("td", { class: "num" }, t[w][m]))))));
  } catch (err) { parts.push(alertBox(`Throughput: ${explain(err)}`)); }
  try { parts.splice(1, 0, await throughputCharts(scope)); } catch (err) { parts.push(alertBox(`Charts: ${explain(err)}`)); }
  if (s.kind === "admin") parts.push(await workerMetrics());
  put(results, ...parts);
}

// A small bar chart of the last hour, one bar per minute (inline SVG: no library, works offline).
// Screen readers get the numbers from the figure's caption and the SVG's title.
function minuteChart(id, title, points, value, unit) {
  const NS = "http://www.w3.org/2000/svg", W = 600, H = 120, bar = W / Math.max(points.length, 1);
  const values = points.map(value), top = Math.max(...values.filter((v) => v !== null), 0);
  const svg = document.createElementNS(NS, "svg");
  for (const [k, v] of Object.entries({ viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${id}-title`,
    class: "chart", preserveAspectRatio: "none" })) svg.setAttribute(k, v);
  const label = document.createElementNS(NS, "title");
  label.id = `${id}-title`;
  const last = values.filter((v) => v !== null).at(-1);
  label.textContent = `${title}: highest ${fmtNum(top, 2)}${unit}, latest minute ${last === undefined ? "none" : fmtNum(last, 2) + unit}`;
  svg.append(label);
  values.forEach((v, i) => {
    if (!v || top === 0) return;  // no bar for an empty minute
    const r = document.createElementNS(NS, "rect"), height = Math.max(1, (v / top) * (H - 4));
    for (const [k, a] of Object.entries({ x: i * bar + 0.5, y: H - height, width: Math.max(bar - 1, 1), height,
      "data-minute": points[i].minute, "data-value": v })) r.setAttribute(k, a);
    svg.append(r);
  });
  return h("figure", { class: "chart", id }, h("figcaption", {}, title, " ",
    h("span", { class: "muted" }, `(last hour, per minute; highest ${fmtNum(top, 2)}${unit})`)), svg);
}

async function throughputCharts(scope) {
  const points = await api("/v1/ui/throughput/minutes", { params: scope });
  return h("section", { "aria-labelledby": "charts" }, h("h2", { id: "charts" }, "Last hour"),
    h("div", { class: "charts" },
      minuteChart("chart-messages", "Messages projected", points, (p) => p.messages, ""),
      minuteChart("chart-lag", "Projection lag (95th percentile)", points, (p) => p.delay_p95_s, " s")));
}

function sumBy(family, label) {
  const out = {};
  for (const x of family?.samples || []) out[x.labels[label] ?? "—"] = (out[x.labels[label] ?? "—"] || 0) + (x.value ?? x.count ?? 0);
  return out;
}

async function workerMetrics() {
  // The worker's own Prometheus metrics (every tenant), reduced to what an operator looks at first:
  // lag per consumer, model calls and failures, dead letters. Grafana (deploy/grafana/) has the rest.
  const box = h("section", { "aria-labelledby": "worker-metrics" }, h("h2", { id: "worker-metrics" }, "Worker metrics"));
  let m;
  try { m = await api("/v1/ui/admin/worker-metrics"); } catch (err) { box.append(alertBox(explain(err))); return box; }
  if (m.error) { box.append(h("p", { class: "note" }, `Not available from ${m.url ?? "the worker"}: ${m.error}`)); return box; }
  const f = Object.fromEntries(m.metrics.map((x) => [x.name, x]));
  const lag = sumBy(f.memory_consumer_lag_records, "consumer");
  const llm = {};
  for (const x of f.memory_llm_latency_seconds?.samples || []) llm[`${x.labels.operation} ${x.labels.outcome}`] = x.count;
  const rows = [
    ...Object.entries(lag).sort((a, b) => b[1] - a[1]).map(([k, v]) => ["lag (records)", k, v]),
    ...Object.entries(llm).map(([k, v]) => ["LLM calls", k, v]),
    ...Object.entries(sumBy(f.memory_embedding_model_calls, "kind")).map(([k, v]) => ["embedding calls", k, v]),
    ...Object.entries(sumBy(f.memory_embedding_model_failures, "kind")).map(([k, v]) => ["embedding failures", k, v]),
    ...Object.entries(sumBy(f.memory_dead_letters, "reason")).map(([k, v]) => ["dead letters", k, v]),
  ];
  box.append(h("p", { class: "muted" }, `From ${m.url}`), table(null, ["Measure", "Of", { label: "Value", num: true }],
    rows.map(([a, b, v]) => h("tr", {}, h("td", {}, a), h("td", {}, b), h("td", { class: "num" }, fmtNum(v, 0)))),
    { "aria-label": "Worker metrics" }));
  return box;
}

// ---------- router ----------
function setNav(s, route) {
  document.getElementById("nav").hidden = !s;
  document.getElementById("who").hidden = !s;
  if (!s) return;
  document.getElementById("who-text").textContent = s.kind === "admin" ? "Admin key: every tenant"
    : `Tenant ${s.tenant}${s.user ? `, user ${s.user}` : ""}`;
  for (const a of document.querySelectorAll("#nav a")) {
    a.parentElement.hidden = !may[a.dataset.needs](s);
    if (a.getAttribute("href") === `#/${route}`) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
}
const ROUTES = { conversations: [conversationsPage, "any"], search: [searchPage, "user"], facts: [factsPage, "user"],
                 generations: [generationsPage, "admin"], "dead-letters": [deadLettersPage, "admin"], stats: [statsPage, "tenant"] };

function render() {
  const s = session();
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "conversations").split("?");
  const parts = path.split("/").map(decodeURIComponent);
  setNav(s, parts[0]);
  if (!s) return loginPage();
  if (parts[0] === "conversation" && parts.length === 3) return conversationPage(parts[1], parts[2]);
  const route = ROUTES[parts[0]];
  if (!route) return page("Not found", h("p", {}, "No such page. ", h("a", { href: "#/conversations" }, "Conversations")));
  if (!may[route[1]](s)) return page("Not available", h("p", { class: "note" }, "This key may not use this page."));
  return route[0](new URLSearchParams(query || ""));
}

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(STORE);
  location.hash = "";
  render();
});
window.addEventListener("hashchange", render);
render();
