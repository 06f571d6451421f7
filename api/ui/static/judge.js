// The generations page's judgement panel (issue 26, docs/replay.md "Judging"): the last judgement
// of B against A beside the gated activate button, and a button to judge a sample now. Uses
// app.js's helpers (h, put, api, explain, alertBox, badge); loaded before it, called by it.
"use strict";

function judgementFacts(j) {
  const o = j.overall;
  const f = (v, sign) => (v === null || v === undefined ? "—" : (sign && v > 0 ? "+" : "") + Number(v).toFixed(3));
  const tone = { worse: "warn", better: "ok" }[o.verdict] || "";
  return h("div", { class: "judgement", "data-verdict": o.verdict },
    h("p", {}, badge(`${j.b} is ${o.verdict === "worse" || o.verdict === "better" ? o.verdict + " than" : o.verdict + " as"} ${j.a}`, tone),
      ` judged ${j.judged_at ? fmtTime(j.judged_at) : "now"} on ${o.turns} recorded turns (${o.scored_turns} with a continuation)`),
    h("dl", { class: "facts" },
      h("dt", {}, "Foresight (share of what came next the context held)"),
      h("dd", { "data-field": "foresight" }, `${j.a} ${f(o.foresight_a)} → ${j.b} ${f(o.foresight_b)} (${f(o.delta, true)}, margin ${o.margin})`),
      h("dt", {}, "Named things held"), h("dd", {}, `${f(o.named_a)} → ${f(o.named_b)}`),
      h("dt", {}, "Turns"), h("dd", {}, `better ${o.turns_better}, worse ${o.turns_worse}, same ${o.turns_same}`),
      h("dt", {}, "Items"), h("dd", {}, `kept ${o.items_kept}, lost ${o.items_lost}, gained ${o.items_gained}`),
      h("dt", {}, "Tokens"), h("dd", {}, `${o.tokens_a} → ${o.tokens_b}`)));
}

function judgePanel(a, b) {
  const out = h("div", { id: "judgement" });
  const result = h("div", { role: "status" });
  const sample = h("input", { type: "number", name: "sample", min: 1, max: 2000, value: 200 });
  const show = async () => {
    put(out, loading());
    try {
      const j = await api("/v1/admin/generations/judgements/last", { params: { a: a(), b: b() } });
      put(out, j ? judgementFacts(j) : h("p", { class: "note" }, `No judgement of ${b()} against ${a()} yet.`));
    } catch (err) { put(out, alertBox(explain(err))); }
  };
  const judgeNow = async () => {
    put(result, loading());
    try {
      await api(`/v1/admin/generations/${encodeURIComponent(b())}/judge`, { method: "POST", params: { against: a(), sample: sample.value } });
      put(result);
      await show();
    } catch (err) { put(result, alertBox(explain(err))); }
  };
  const activate = async () => {
    put(result, loading());
    try {
      const r = await api(`/v1/admin/generations/${encodeURIComponent(b())}/activate`, { method: "POST", params: { if_better_than: a() } });
      put(result, h("p", { class: "note" }, `Reads now come from ${r.active}. ${r.gate || ""}`));
    } catch (err) { put(result, alertBox(explain(err))); }
  };
  const panel = h("section", { "aria-labelledby": "judge-title" },
    h("h2", { id: "judge-title" }, "Judge and activate"),
    h("p", { class: "muted" }, "B is asked the requests A served, as of the same turns (B writes nothing), and each context is scored by how much of what came next in the log it held."),
    out,
    h("div", { class: "row" }, field("Turns to judge", sample),
      h("button", { type: "button", onclick: judgeNow }, "Judge B against A"),
      h("button", { type: "button", id: "activate-if-better", onclick: activate }, "Activate B if not worse than A")),
    result);
  show();
  return { panel, refresh: show };
}
