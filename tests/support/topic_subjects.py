"""A labelled multi-subject chat for topic matching: six subjects, seven user turns each,
interleaved with returns to earlier subjects. Follow-ups are written as people write them
(some name their subject, some only continue it), so the set measures what a threshold
does on real phrasing, not on keywords. Used by tests and bench/topic_threshold_bench.py.
"""

from __future__ import annotations

# subject -> the user's turns on it, in order (each followed by a short assistant reply).
SUBJECTS: dict[str, list[str]] = {
    "sourdough": [
        "I want to bake my first sourdough bread this weekend. How do I start a starter from scratch?",
        "My sourdough starter smells like nail polish remover after four days. Is it ruined?",
        "How often should I feed the starter, and with how much flour and water?",
        "Back to the bread: what hydration should a beginner sourdough loaf have?",
        "The sourdough loaf came out flat and dense. Was the dough over-proofed?",
        "Should I bake the bread in a Dutch oven, and at what oven temperature?",
        "The crust of my last sourdough loaf was too thick and hard. How do I get a thinner crust?",
    ],
    "taxes": [
        "I started freelancing this year. Do I have to pay income tax in quarterly estimated payments?",
        "Which business expenses can a freelancer deduct, like my laptop and home office?",
        "How do I calculate the home office deduction for a room I also use as a guest room?",
        "About my freelance taxes again: what happens if I missed the September estimated tax payment?",
        "Should I open a separate bank account for my freelance invoices and business expenses?",
        "Do I need to keep the receipts of deductible expenses, and for how many years?",
        "Can I deduct health insurance premiums as a self-employed freelancer on my tax return?",
    ],
    "marathon": [
        "I signed up for my first marathon in April. How many weeks of training do I need?",
        "How many kilometres per week should I run at the peak of marathon training?",
        "My left knee hurts after long runs. Should I stop running for a few days?",
        "What should I eat and drink during a long run of 30 kilometres?",
        "Going back to the marathon plan: how do I taper in the last three weeks before the race?",
        "What pace should I aim for if I want to finish the marathon in under four hours?",
        "Which running shoes are good for a heavier runner training for a marathon?",
    ],
    "renovation": [
        "We are renovating our kitchen. Should the floor tiles be ceramic or porcelain?",
        "How much does it usually cost to replace kitchen cabinets in a small kitchen?",
        "Can I install the kitchen backsplash tiles myself, and what grout should I use?",
        "The contractor wants to move the sink to the window. Does moving plumbing in a kitchen renovation cost a lot?",
        "For the kitchen countertops, is quartz better than granite?",
        "How long does a full kitchen remodel usually take from demolition to finished?",
        "Which lighting works best under the kitchen cabinets: LED strips or puck lights?",
    ],
    "spanish": [
        "I'm learning Spanish for a move to Madrid next year. Which apps help with vocabulary?",
        "When do I use ser and when estar in Spanish?",
        "How do I practise Spanish conversation if I have no native speakers around me?",
        "The Spanish subjunctive confuses me. When is it required after 'espero que'?",
        "Are Spanish podcasts or Spanish TV series better for improving my listening comprehension?",
        "How long does it take to reach a B2 level of Spanish studying one hour a day?",
        "Should I learn the vosotros forms in Spanish if I will live in Spain?",
    ],
    "python_bug": [
        "My Flask web app returns a 500 error when I submit the login form. How do I see the Python traceback?",
        "The traceback says KeyError: 'username' in request.form. What does that mean in Flask?",
        "Now the Python app crashes with 'sqlite3.OperationalError: database is locked' under load.",
        "How do I write a pytest test for the Flask login route with a test client?",
        "The Flask session cookie is not kept between requests in my tests. What am I missing in the Python code?",
        "Should I switch the Flask app from SQLite to PostgreSQL to fix the locking errors?",
        "How do I log every Python exception in the Flask app to a file instead of the console?",
    ],
}

# Runs of (subject, number of consecutive turns): every subject comes back at least once.
_RUNS: tuple[tuple[str, int], ...] = (
    ("sourdough", 3), ("taxes", 3), ("marathon", 2), ("sourdough", 2), ("renovation", 3),
    ("spanish", 3), ("taxes", 2), ("python_bug", 3), ("marathon", 3), ("renovation", 2),
    ("sourdough", 2), ("spanish", 2), ("python_bug", 2), ("taxes", 2), ("marathon", 2),
    ("renovation", 2), ("spanish", 2), ("python_bug", 2),
)

_REPLY = "Here is what I would suggest for that: start simple, check the result, and tell me how it goes."


def conversation(with_replies: bool = True) -> list[tuple[str, str, str]]:
    """(subject, role, content) in chat order; every user turn is followed by a short reply
    that names nothing (the fold puts replies in the topic of their turn)."""
    cursors = {name: 0 for name in SUBJECTS}
    out: list[tuple[str, str, str]] = []
    for subject, count in _RUNS:
        for _ in range(count):
            out.append((subject, "user", SUBJECTS[subject][cursors[subject]]))
            if with_replies:
                out.append((subject, "assistant", _REPLY))
            cursors[subject] += 1
    assert all(cursors[name] == len(turns) for name, turns in SUBJECTS.items()), cursors
    return out


def score(labels: list[str], topics: list[str]) -> tuple[int, float]:
    """How many topics the subjects became, and the share of messages that sit in the topic
    most of their subject's messages are in, when that topic is mostly theirs (a subject split
in two loses the smaller part; two subjects merged into one topic lose the smaller one)."""
    from collections import Counter

    home = {subject: Counter(t for s, t in zip(labels, topics) if s == subject).most_common(1)[0][0]
            for subject in set(labels)}
    owner = {topic: Counter(s for s, t in zip(labels, topics) if t == topic).most_common(1)[0][0]
             for topic in set(topics)}
    right = sum(1 for s, t in zip(labels, topics) if home[s] == t and owner[t] == s)
    return len(set(topics)), right / len(labels)
