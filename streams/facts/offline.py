"""The offline extractor (no LLM): facts from every human speaker, by name and dated, typed and
ranked by rules, and a chunk summary that keeps names, numbers, places and dates.

A documented fallback, recorded as `offline-rules-v2`, never presented as an LLM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from domain.dates import annotate, format_date
from domain.extractive import DatedSentence, dense_summary, split_sentences
from domain.speakers import Spoken, in_third_person, speaker_of

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A first-person statement: I/we/my/our as the subject within the first few words
# ("Yesterday I went...", "Last week my sister..."), not a question or a pleasantry.
_FIRST_PERSON = re.compile(r"^(?:\W*\w+\W+){0,4}?(?:i|we|my|our|i'm|i've|we're|we've|i'd|i'll)\b")
# Said in passing: the statement follows a clause about something else ("Work's been crazy, but
# I finally signed up for pottery", "Last week at the beach, my kids and I built...").
_FIRST_PERSON_IN_PASSING = re.compile(
    r"(?:[,;]|\b(?:but|and|so|because|since|when|while|after|before|though|although))\s+(?:\w+\s+){0,2}?"
    r"(?:i|we|my|our|i'm|i've|we're|we've|i'd|i'll)\b(?!\W*$)")
# First person further in: a possessive or object after a preposition ("Here's a photo of my
# garden", "Books have always helped me") or an object of the verb ("Those trips make me calm").
_FIRST_PERSON_OBJECT = re.compile(r"\b(?:of|with|for|to|from|at|about|on|make|makes|made|help|helps|helped"
                                  r"|give|gives|gave|remind|reminds|reminded|keeps|kept)"
                                  r" (?:\w+ )?(?:my|me|mine|myself|our|us)\b")
# Speaking to the listener ("Let me know if you...", "Thanks for helping me"): a statement about
# the speaker has no second person in it, and does not start by thanking or wishing.
_TO_THE_LISTENER = re.compile(r"\b(?:you|you're|you've|your|yours|yourself|you'll|you'd|ya)\b"
                              r"|^(?:\W*\w+\W+)?(?:thanks|thank|hope|congrats|congratulations|let's|let)\b")
# The subject left out, as chat does ("Miss being outdoors.", "Used to hike a lot.", "Been painting
# since spring.", "Just got back from Rome."): a first word only the speaker can be the subject
# of, past forms and a few verbs of feeling, not base forms that read as a request ("Enjoy it",
# "Have fun", "Take care"); an adverb first ("Just", "Really") only before such a word.
_ELIDED_SUBJECT = {w: "I " for w in (
    "love loved miss missed hated enjoyed preferred adored used went took tried started finished visited joined"
    " signed bought spent got had saw met moved found learned learnt picked grew can't cannot couldn't haven't"
    " hadn't didn't wasn't").split()} | {"gonna": "I'm ", "planning": "I'm ", "hoping": "I'm ", "been": "I've "}
_ELIDED_ADVERBS = frozenset("just really still always never usually recently finally totally".split())
_NOT_AFTER_ELIDED = frozenset("and or is was are were has have can will would should".split())  # "Love and hope are"
_NOT_A_FACT = re.compile(
    r"\?\s*$|^(?:i|we) (?:was|were) (?:wondering|just|going to ask)\b|^(?:i|we) have (?:a|another) question"
    r"|^(?:my|our) (?:question|point|bad|pleasure|apologies)\b"
    r"|^i (?:think|guess|mean|suppose|wonder|bet|believe)\b"
    r"|^i(?:'d| would)? (?:need|want|like|love) (?:to know|to ask|to understand|help|some help|a hand|you to)\b"
    r"|^i(?:'m| am) (?:asking|trying to understand|not sure|confused)\b"
    r"|^i (?:agree|see|hope|know|understand|appreciate|feel)\b(?:\W+\w+){0,3}\W*$"
    r"|^i(?:'m| am) (?:so |really |very |just )?(?:glad|happy|sorry|excited|thrilled|proud) (?:for|to hear|that) you")
_INTERJECTION = re.compile(r"^(?:(?:yes|yeah|yep|no|oh|ah|well|so|haha|wow|ok|okay|honestly|actually|hey|hi"
                           r"|aww|omg|lol)\b[,!.]?\s+)+", re.IGNORECASE)
# A lead-in before a colon that only announces what follows ("Different subject:", "Quick update:",
# "Now something else entirely:"): up to six words, none of them first person, then ": " and the
# statement. "My favourite dishes: ramen" keeps its subject; "at 10:30" has no space after the colon.
_LEAD_IN = re.compile(r"^(?P<lead>(?:[A-Za-z][\w'\-]*[,]?\s+){0,5}[A-Za-z][\w'\-]*)\s*:\s+(?=\S)")
_FIRST_PERSON_WORD = re.compile(r"\b(?:i|we|my|our|me|us|mine|ours)\b|\bi'", re.IGNORECASE)
# "Our mobile app needs it too": a short statement about something named only in an earlier
# message says nothing on its own (an LLM would resolve it; this rule cannot), so it is left out.
# Dangling: a sentence that starts with it/this/that as its subject ("It was my first
# marathon"), or ends on a bare it/them/this/that ("... needs it too."), with few content words.
_DANGLING = re.compile(r"^(?:it|this|that)\b(?!'| is\b)|\b(?:it|them|this|that)(?: too| as well| also)?\W*$")
_DANGLING_MAX_CONTENT = 4
_RULES = tuple((category, frozenset(words.split())) for category, words in (
    # first match wins; the order resolves overlaps ("my daughter was born" is a milestone)
    ("milestone", "born graduated graduation retired promoted anniversary birthday moved died passed engaged"
                  " founded adopted married wedding pregnant diagnosed divorced hired"),
    ("relationship", "daughter son wife husband mother mom mum father dad brother sister friend friends partner"
                     " girlfriend boyfriend family kids children cousin aunt uncle grandmother grandfather grandma"
                     " grandpa parents"),
    ("occupation", "work worked working job engineer developer teacher doctor nurse company office career boss"
                   " colleague colleagues profession counselor counseling business startup"),
    ("habit", "usually always every daily weekly routine habit often"),
    ("hobby", "play playing hobby guitar piano painting painted paint hiking running cycling chess garden"
              " gardening football soccer tennis climbing photography knitting reading camping pottery"
              " swimming dancing singing music"),
    ("preference", "prefer prefers like likes love loves enjoy enjoys hate dislike favorite favourite rather"),
    ("personality", "shy introvert introverted extrovert patient anxious curious organised organized calm"
                    " stubborn"),
))
_TYPES = (  # seed 001's memory types, first match wins
    ("decision", re.compile(r"\b(?:decided|decide|chose|choose|going to|will|plan|plans|planning|"
                            r"signed up|booked|agreed to)\b")),
    ("preference", re.compile(r"\b(?:prefer|prefers|like|likes|love|loves|enjoy|enjoys|hate|hates|dislike|"
                              r"dislikes|favorite|favourite|fan of|can't stand)\b")),
    ("insight", re.compile(r"\b(?:learned|learnt|realized|realised|lesson|figured out|discovered|"
                           r"taught \w+ that|means that)\b")),
    ("project", re.compile(r"\b(?:working on|project|building|writing a|studying|training for|"
                           r"preparing for|renovating)\b")),
)
_CRITICAL = frozenset(
    "born died passed married divorced pregnant diagnosed allergic allergy cancer surgery hospitalized adopted"
    " engaged funeral accident wedding".split())
_NOISE = frozenset(
    "hi hello hey thanks thank you ok okay sure yes no yeah yep nope cool great nice good bye goodbye see ya"
    " got it alright right fine lol haha welcome a an the and or but to of in on at for with is are was were"
    " that this be so i me my we our you your do did it its it's just really very too much lot lots also"
    " am i'm i've have has had been being can could would will about what how wow awesome amazing totally"
    " glad happy love sounds sound feel felt think know wow cute fun there here them they their".split())


_NOT_TAGS = frozenset(
    "last next week weeks weekend month months year years ago today yesterday tomorrow going thinking named"
    " called want wants wanted trying tries lives living".split())


@dataclass(frozen=True)
class ExistingFact:
    """A current fact of the same owner and subject the extractor may update or repeat."""

    fact_id: str
    content: str
    category: str = "other"


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def category_of(words: Sequence[str]) -> tuple[str, str | None]:
    for category, keywords in _RULES:
        for word in words:
            if word in keywords:
                return category, word
    return "other", None


def memory_type_of(text: str, category: str) -> str:
    lowered = text.lower()
    for kind, pattern in _TYPES:
        if pattern.search(lowered):
            return kind
    return "preference" if category == "preference" else "fact"


def importance_of(text: str, category: str, memory_type: str) -> int:
    """1-5 by rules: life events and health 5, other milestones, relationships, work and
    decisions 4, plain statements, likes, habits and hobbies 3 (inference questions need
    them: what someone would enjoy is read from what they said they like), short remarks 2."""
    words = set(_words(text))
    if words & _CRITICAL:
        return 5
    score = 3
    if category in ("milestone", "relationship", "occupation") or memory_type in ("decision", "project"):
        score = 4
    content = [w for w in words if w not in _NOISE]
    if len(content) <= 3 and score > 2:
        score -= 1  # "The user likes tea": a passing remark
    return max(1, min(5, score))


def tags_of(text: str, keyword: str | None, skip: str | None, limit: int = 5) -> tuple[str, ...]:
    """The category's keyword, then names and numbers, then the longest content words."""
    text = re.sub(r"\([^()]*\)", " ", text)  # resolved dates are no topic
    raw = re.findall(r"[A-Za-z][\w'\-]*|\d[\d.,:/]*", text)
    skip_words = set(_words(skip or "")) | _NOT_TAGS
    names = [w.lower() for i, w in enumerate(raw) if i and w[0].isupper() and w.lower() not in skip_words
             and w.lower() not in _NOISE and not w.lower().endswith("'s")]
    numbers = [w.rstrip(".,") for w in raw if w[0].isdigit()]
    content = sorted({w for w in _words(text) if w not in _NOISE and len(w) > 3 and w not in skip_words
                      and not w.endswith("'s")}, key=lambda w: (-len(w), w))
    tags = [t for t in ([keyword] if keyword else []) + names + numbers + content if t]
    return tuple(dict.fromkeys(tags))[:limit]


def strip_lead_in(sentence: str) -> str:
    """The sentence without an announcing lead-in ("Different subject: I'm training..." -> "I'm
    training..."); unchanged when the part before the colon speaks of the speaker."""
    match = _LEAD_IN.match(sentence)
    if match is None or _FIRST_PERSON_WORD.search(match.group("lead")):
        return sentence
    rest = sentence[match.end():]
    return rest[0].upper() + rest[1:]


def with_subject(sentence: str) -> str:
    """The sentence with its left-out first-person subject restored ("Miss being outdoors." ->
    "I miss being outdoors."; "Been painting a lot" -> "I've been painting a lot"), or as it is."""
    words = [w.lower().replace("\u2019", "'").strip(",.!") for w in sentence.split(" ", 3)]
    if len(words) < 2 or _TO_THE_LISTENER.search(sentence.lower()):
        return sentence
    verb, after = (words[1], words[2:3]) if words[0] in _ELIDED_ADVERBS else (words[0], words[1:2])
    prefix = _ELIDED_SUBJECT.get(verb)
    if prefix is None or not after or after[0] in _NOT_AFTER_ELIDED or (verb == "been" and not after[0].endswith("ing")):
        return sentence
    return prefix + sentence[0].lower() + sentence[1:]


def is_first_person(lowered: str) -> bool:
    """The speaker speaks of themselves: I/we/my/our near the start or after a clause about
    something else, or my/me/us after a preposition or a verb like make, help or remind."""
    if _FIRST_PERSON.match(lowered) or _FIRST_PERSON_IN_PASSING.search(lowered):
        return True
    return bool(_FIRST_PERSON_OBJECT.search(lowered)) and not _TO_THE_LISTENER.search(lowered)


def fact_sentences(spoken: Spoken, at: datetime | None) -> list[str]:
    """A human speaker's first-person statements, rewritten by name and dated."""
    if spoken.speaker is None:
        return []
    found = []
    for sentence in split_sentences(spoken.text):
        sentence = strip_lead_in(sentence)
        sentence = with_subject(_INTERJECTION.sub("", sentence) or sentence)
        lowered = sentence.lower().replace("\u2019", "'")
        words = _words(lowered)
        content = [w for w in words if w not in _NOISE]
        first_person = is_first_person(lowered)
        if not first_person or _NOT_A_FACT.search(lowered) or len(content) < 2:
            continue
        if len(content) <= _DANGLING_MAX_CONTENT and _DANGLING.search(lowered):
            continue
        sentence = _INTERJECTION.sub("", sentence) or sentence  # "Yes, I was..." -> "I was..."
        text = annotate(in_third_person(sentence, spoken.speaker), at)
        found.append(text if text[-1] in ".!" else text + ".")
    return found


def is_worth_it(messages: Sequence[Any], min_content_words: int = 6) -> tuple[bool, str]:
    """Seed 001's cheap gate without a model: a human's first-person statement, or a human
    message with at least `min_content_words` words that are neither chatter nor stopwords."""
    spoken = [(s, getattr(m, "occurred_at", None)) for m in messages
              if (s := speaker_of(m.role, m.content)) is not None and s.speaker is not None]
    if any(fact_sentences(s, at) for s, at in spoken):
        return True, "a speaker made a first-person statement"
    for s, _ in spoken:
        content = [w for w in _words(s.text) if w not in _NOISE]
        if len(content) >= min_content_words:
            return True, f"a message with {len(content)} content words"
    return False, "only greetings, acknowledgements or short chatter"


_UPDATE = re.compile(r"\b(?:moved|moving|relocated) (?:from (?P<old>[A-Z][\w\- ]*?) )?to (?P<new>[A-Z][\w\-]*(?: "
                     r"[A-Z][\w\-]*)*)")


def derived_updates(fact: str, speaker: str) -> list[str]:
    """A move implies where the speaker lives now: "Caroline moved from Lisbon to Porto" adds
    "Caroline lives in Porto", which supersedes "Caroline lives in Lisbon" in dedup."""
    match = _UPDATE.search(fact)
    if match is None or not fact.startswith(speaker):
        return []
    return [f"{speaker} lives in {match.group('new')}."]


def _verdicts(fact: str, existing: Sequence[ExistingFact]) -> tuple[str | None, str | None]:
    """Offline use of the related memories: an identical one is a duplicate (merged); a
    "lives in" fact of the same speaker with another place is updated (superseded)."""
    key = " ".join(_words(fact))
    for old in existing:
        if " ".join(_words(old.content)) == key:
            return "duplicate", old.fact_id
    lives = re.match(r"^(.+?) lives in (.+?)\.?$", fact)
    if lives:
        for old in existing:
            before = re.match(r"^(.+?) (?:lives|lived|is living) in (.+?)\.?$", old.content)
            if before and before.group(1) == lives.group(1) and before.group(2) != lives.group(2):
                return "contradicts", old.fact_id
    return None, None


def offline_facts(messages: Sequence[Any], existing: Sequence[ExistingFact] = ()) -> list[dict]:
    """Every human speaker's facts as dicts (content, category, memory_type, importance, tags,
    relation, target_fact_id), in conversation order, without repeats."""
    facts: list[dict] = []
    seen: set[str] = set()
    for message in messages:
        spoken = speaker_of(message.role, message.content)
        if spoken is None or spoken.speaker is None:
            continue
        at = getattr(message, "occurred_at", None)
        for sentence in fact_sentences(spoken, at):
            for content in [sentence, *derived_updates(sentence, spoken.speaker)]:
                if content.casefold() in seen:
                    continue
                seen.add(content.casefold())
                category, keyword = category_of(_words(content))
                kind = memory_type_of(content, category)
                relation, target = _verdicts(content, existing)
                derived = content != sentence  # where someone lives now: as important as the move
                facts.append({"content": content, "category": category, "memory_type": kind,
                              "importance": 4 if derived else importance_of(content, category, kind),
                              "tags": list(tags_of(content, keyword, spoken.speaker)),
                              "relation": relation, "target_fact_id": target})
    return facts


def offline_summary(messages: Sequence[Any], max_chars: int) -> str:
    """The chunk's densest sentences (names, numbers, places, dates) within `max_chars`, by
    speaker and dated, in conversation order; system and tool messages left out."""
    items = []
    for message in messages:
        spoken = speaker_of(message.role, message.content)
        if spoken is None:
            continue
        at = getattr(message, "occurred_at", None)
        label = spoken.speaker or message.role
        day = format_date(at) if at is not None else None
        items.extend(DatedSentence(label, annotate(s, at), day) for s in split_sentences(spoken.text))
    return dense_summary(items, max_chars)


def related_query(messages: Sequence[Any], limit: int = 80) -> str:
    """A PostgreSQL to_tsquery OR-query of the chunk's most frequent content words (names
    first), to find the owner's related memories; "" when there are none."""
    counts: dict[str, int] = {}
    for message in messages:
        spoken = speaker_of(message.role, message.content)
        if spoken is None:
            continue
        for word in _words(spoken.text):
            if word not in _NOISE and word not in _NOT_TAGS and len(word) > 2 and word.isalnum():
                counts[word] = counts.get(word, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))[:limit]
    return " | ".join(words)


def pick_related(stored: Sequence[ExistingFact], recent: Sequence[ExistingFact], query: str,
                 limit: int) -> list[ExistingFact]:
    """Up to half of `limit` from the recently recorded facts (maybe not projected yet) that
    share query words, most shared first; then the stored ones (already ranked); no fact twice."""
    words = set(query.split(" | "))
    ranked = sorted(((len(words & set(_words(f.content))), -i, f) for i, f in enumerate(recent)),
                    key=lambda t: (-t[0], t[1]))
    fresh = [f for shared, _, f in ranked if shared > 0][:max(limit // 2, 1)]
    return list({f.fact_id: f for f in [*fresh, *stored]}.values())[:limit]
