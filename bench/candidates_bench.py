"""The context's Python from the search's rows to the scores, in one source tree: CPU per context.

    PYTHONPATH=. python bench/candidates_bench.py 60             # this tree, 60 rows a context
    (cd /tmp/main && PYTHONPATH=. python /path/to/bench/candidates_bench.py 60)   # another tree

What `retrieval.service.retrieve` does between the statement and packing: the row factory
(`rows_with_coverage`), the reply pairing, the candidates' keys, the surfaced set, the lexemes,
`to_candidates` and `score_candidates`, on deterministic synthetic rows (a third each fact, chunk,
message; no statement, no packing). Run the trees alternately: the ratio is the figure.
(It supports main before `to_candidates(keys=...)` existed, for that comparison.)"""
import inspect, random, sys, time
from datetime import UTC, datetime, timedelta
from dataclasses import fields
from types import SimpleNamespace
from retrieval.search import SearchRow, rows_with_coverage
from retrieval import service as S
from retrieval.scoring import score_candidates, still_visible
NOW = datetime(2026, 3, 1, tzinfo=UTC)
rng = random.Random(5)
names = [f.name for f in fields(SearchRow)]
weights = {"port": 3.1, "databas": 2.2, "configur": 1.4}
def values(i):
    kind = ["fact", "chunk", "message"][i % 3]
    v = {n: None for n in names}
    v.update(kind=kind, item_id=f"c{i}:{i}" if kind == "message" else f"id{i}", content=f"Ana: message {i} about the port and the databases we configured " * (1 + i % 3),
             cosine=rng.uniform(-0.1, 0.6), keyword_score=0.0, in_vector=True, in_keyword=False,
             surfaced_seqs=[3, None] if i % 17 == 0 else None, timestamp=NOW - timedelta(days=rng.uniform(0, 300)),
             importance=3 if kind == "fact" else None, role="user" if kind == "message" else None,
             occurred_start=NOW, occurred_end=NOW, range_start=i if kind == "message" else None, range_end=None,
             conversation_id=f"c{i}", lexemes=["port"] if i % 4 == 0 else [], doc_lexemes=3 + i % 9)
    return [v[n] for n in names]
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
raw = [values(i) for i in range(ROWS)]
cursor = SimpleNamespace(description=[SimpleNamespace(name=n) for n in names])
config = S.RetrievalConfig()
keyed = "keys" in inspect.signature(S.to_candidates).parameters
def context():
    make = rows_with_coverage(weights)(cursor)
    rows = S.pair_replies([make(v) for v in raw], config)
    if keyed:
        keys = [f"{r.kind}:{r.item_id}" for r in rows]
        by_key = dict(zip(keys, rows))
        visible = {k for k, r in by_key.items() if r.surfaced_seqs and still_visible(r.surfaced_seqs, 20, 14)}
        lexemes = sorted({l for r in rows if r.lexemes for l in r.lexemes})
        cands = S.to_candidates(rows, config, lexemes, keys)
    else:
        by_key = {S.key(r.kind, r.item_id): r for r in rows}
        visible = {k for k, r in by_key.items() if still_visible(r.surfaced_seqs, 20, 14)}
        lexemes = sorted({l for r in rows for l in (r.lexemes or ())})
        cands = S.to_candidates(rows, config, lexemes)
    return score_candidates(cands, NOW.timestamp(), visible, config.scoring)
for _ in range(50): context()
n = 1500
c = time.process_time()
for _ in range(n): r = context()
print(f"{'keys' if keyed else 'no keys'} rows={ROWS} cpu_ms_per_context={(time.process_time()-c)/n*1e3:.4f} kept={len(r.kept)}")
