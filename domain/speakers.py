"""Who said it (pure): human speakers, "Name: text" prefixes, and first person rewritten by name.

Conversations between two people arrive as `"Caroline: I adopted a cat"` with role `user` or
`assistant`. A message is a human speaker's when its role is `user`, or when any role but a
system/tool one carries a name prefix. The speaker is the prefix's name, else "The user". An
`assistant` message without a name is the AI assistant: summarized, never a source of facts.
System, tool and function messages are left out of memory altogether.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SKIPPED_ROLES = frozenset({"system", "tool", "function", "developer"})
USER_NAME = "The user"
_PREFIX = re.compile(r"^\s*([A-Z][\w.'\-]*(?: [A-Z][\w.'\-]*){0,2}):\s+(?=\S)")
_NOT_NAMES = frozenset(
    "note notes update edit ps re q a answer question summary warning error todo step tip hint example"
    " fyi important reminder result output input user assistant system tool".split())

_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|[^A-Za-z]+")
_ADVERBS = frozenset(
    "just also still always never often even already only really kinda sometimes finally actually recently"
    " totally usually truly definitely absolutely currently now too both all basically honestly mostly rarely"
    " seriously literally probably certainly".split())
_KEEP = frozenset(  # verb forms that do not change with the person
    "can could will would shall should may might must was had did went got saw took made met said told bought"
    " ran won lost felt found gave left thought knew grew wrote brought built kept spent sent taught caught held"
    " heard paid sat stood understood became chose drove ate fell flew forgot hid rode sang swam threw woke wore"
    " broke spoke stole began came read put set let cut hit hurt quit shut cost sold slept meant dealt lent"
    " lit led fed fought sought shot spun struck swore tore bit dug hung bent built burnt learnt dreamt"
    " knelt leapt spelt spilt sped wound froze shook drew sank stank shrank rang slid split spread".split())
_IRREGULAR = {"am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "go": "goes", "don't": "doesn't",
              "haven't": "hasn't", "'d": "would", "'ll": "will", "are": "is", "were": "was", "aren't": "isn't",
              "weren't": "wasn't"}
_THEY = {"i": "they", "me": "them", "my": "their", "mine": "theirs", "myself": "themselves",
         "i'm": "they're", "i've": "they've", "i'd": "they'd", "i'll": "they'll"}
_THEY_VERB = {"am": "are", "was": "were", "wasn't": "weren't"}


@dataclass(frozen=True)
class Spoken:
    """One message as memory sees it: who said it (None: the AI assistant) and the text."""

    speaker: str | None
    text: str
    named: bool  # the name came from a "Name: " prefix


def split_prefix(content: str) -> tuple[str | None, str]:
    """("Caroline", "I adopted a cat") for "Caroline: I adopted a cat"; (None, content) otherwise."""
    match = _PREFIX.match(content)
    if match is None or match.group(1).lower() in _NOT_NAMES:
        return None, content
    return match.group(1), content[match.end():]


def speaker_of(role: str, content: str) -> Spoken | None:
    """None for system and tool messages (left out of memory); otherwise who said the text."""
    role = (role or "").strip().lower()
    if role in SKIPPED_ROLES:
        return None
    name, text = split_prefix(content)
    if name is not None:
        return Spoken(name, text, True)
    return Spoken(USER_NAME if role == "user" else None, content, False)


def _third_person(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low in _KEEP or low.endswith(("ed", "n't")) or not low.isalpha():
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def in_third_person(sentence: str, name: str) -> str:
    """Rewrite a first-person sentence about `name`: "I adopted my cat" -> "Caroline adopted
    Caroline's cat"; later mentions become they/their ("... and they love it"); we/us/our
    become "Caroline and others"/"Caroline's". A rule, not a parser: odd sentences stay odd."""
    sentence = sentence.replace("\u2019", "'")
    tokens = _TOKEN.findall(sentence)
    out: list[str] = []
    named = False
    conjugate = False  # the next verb follows the name (singular) or "they" (plural)
    plural = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        low = token.lower()
        if not token[0].isalpha():
            out.append(token)
            if not token.isspace():
                conjugate = False
            i += 1
            continue
        if low in ("i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself", "we", "us", "our", "ours",
                   "we're", "we've", "we'll", "we'd", "ourselves"):
            first = not named
            if low.startswith("we") or low in ("us", "our", "ours", "ourselves"):
                word = {"our": f"{name}'s", "ours": f"{name}'s", "ourselves": f"{name} and others"}.get(
                    low, f"{name} and others")
                if low.startswith("we'"):
                    word += {"we're": " are", "we've": " have", "we'll": " will", "we'd": " would"}[low]
                conjugate = False
            elif first or low in ("my", "mine"):
                word = {"my": f"{name}'s", "mine": f"{name}'s", "me": name, "myself": name}.get(low, name)
                if low in ("i'm", "i've", "i'd", "i'll"):
                    word += " " + _IRREGULAR["'" + low.split("'")[1]]
                conjugate, plural = low == "i", False
            else:
                word = _THEY[low]
                conjugate, plural = low == "i", True
            if low == "i" and next((t.lower() for t in reversed(out) if not t.isspace()), "") == "and":
                conjugate = False  # "my wife and I are": a compound subject keeps its plural verb
            named = named or low not in ("my", "mine")
            start = not "".join(out).strip()
            if name == USER_NAME and not start:
                word = word.replace(USER_NAME, "the user")
            out.append(word)
            i += 1
            continue
        if conjugate:
            if low in _ADVERBS or low.endswith("ly"):
                out.append(token)
            else:
                out.append(_THEY_VERB.get(low, token) if plural else _third_person(token))
                conjugate = False
            i += 1
            continue
        out.append(token)
        i += 1
    text = "".join(out)
    return text[0].upper() + text[1:] if text else text
