"""`generations judge` as text: the overall figures and the turns that lost most (issue 26)."""

from __future__ import annotations


def render_text(report: dict, per_turn: int = 10) -> str:
    o = report["overall"]
    lines = [f"judgement of {report['b']} against {report['a']} on {o['turns']} recorded turns"
             f" ({o['scored_turns']} with a continuation, {o['errors']} errors):",
             f"  items: kept {o['items_kept']}, lost {o['items_lost']}, gained {o['items_gained']};"
             f" tokens {o['tokens_a']} -> {o['tokens_b']}; summary differs on {o['summary_changed']} turns",
             f"  foresight (share of what came next the context held): {report['a']} {_f(o['foresight_a'])},"
             f" {report['b']} {_f(o['foresight_b'])}, delta {_f(o['delta'], sign=True)}"
             f" (named things: {_f(o['named_a'])} -> {_f(o['named_b'])})",
             f"  turns better {o['turns_better']}, worse {o['turns_worse']}, same {o['turns_same']}",
             f"  verdict: {report['b']} is {o['verdict'].upper()} than {report['a']} (margin {o['margin']})"
             if o["verdict"] in ("better", "worse") else f"  verdict: {o['verdict']} (margin {o['margin']})",
             f"  took {o['seconds']} s ({o['paced_seconds']} s of it paced to {o['cpu_share']} of a core)"]
    worst = sorted((t for t in report["turns"] if t["foresight_a"] is not None and t["foresight_b"] is not None),
                   key=lambda t: t["foresight_b"] - t["foresight_a"])[:per_turn]
    if worst:
        lines.append("  turns that lost most:")
        for t in worst:
            lines.append(f"    {t['conversation']} @{t['turn_seq']}: {_f(t['foresight_a'])} -> {_f(t['foresight_b'])},"
                         f" lost {len(t['lost'])}, gained {len(t['gained'])}, tokens {t['tokens_a']} -> {t['tokens_b']}")
    return "\n".join(lines)


def render_questions(result: dict) -> str:
    lines = ["questions (answer words in the context, hits >= 80%):"]
    for name, q in result["questions"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(q["hits_by_kind"].items())) or "-"
        lines.append(f"  {name}: {q['questions']} questions, answer words {_f(q['answer_words'])},"
                     f" hits {q['hits']} (by kind: {kinds})")
    return "\n".join(lines)


def _f(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.3f}" if sign else f"{value:.3f}")
