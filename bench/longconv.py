"""Deterministic generator of long dated two-person conversations with questions of known answers.

    python bench/longconv.py --conversations 2 --seed 1 [--jsonl out.jsonl]   # print a sample

A conversation: two named people (one `role=user`, the other `role=assistant`, content
`"Name: text"`) talking in 15-30 dated sessions spread over months, tens of messages each.
Small talk surrounds planted facts (jobs, pets and their names, family, hobbies, cities,
numbers, objects), later updates that supersede earlier facts ("we moved from Lisbon to
Porto"), events told with relative dates ("yesterday", "last Friday", "next month") and
facts spread over sessions. Questions of four kinds: `single` (one fact), `multi` (combine
sessions), `temporal` (when: the date resolved from the message's time and its relative
expression) and `inference` (a conclusion from what was said). Every answer is derivable
from the messages listed in its `evidence` (tests/unit/test_longconv.py checks it).
Nothing here is copied from, or tuned to, any public dataset.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

try:
    from . import longconv_vocab as V
except ImportError:  # loaded by file path (bench/context_quality.py) or run as a script
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import longconv_vocab as V

_AN = re.compile(r"\b([Aa]) ([aeioAEIO])")  # "a architect" -> "an architect" (no u: "a ukulele")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4}


def fmt(day: date) -> str:
    """The answers' date format: `7 May 2023`."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _month_shift(day: date, months: int) -> str:
    index = day.year * 12 + day.month - 1 + months
    return f"{MONTHS[index % 12]} {index // 12}"


def resolve(expression: str, said_at: datetime) -> str:
    """What a relative expression, said at `said_at`, refers to (the temporal answers)."""
    day = said_at.date()
    words = expression.split()
    if expression == "yesterday":
        return fmt(day - timedelta(days=1))
    if expression == "tomorrow":
        return fmt(day + timedelta(days=1))
    if len(words) == 3 and words[1:] == ["days", "ago"]:
        return fmt(day - timedelta(days=NUMBER_WORDS[words[0]]))
    if words[0] in ("last", "next") and words[1] in WEEKDAYS:
        target = WEEKDAYS.index(words[1])
        if words[0] == "last":
            return fmt(day - timedelta(days=(day.weekday() - target - 1) % 7 + 1))
        return fmt(day + timedelta(days=(target - day.weekday() - 1) % 7 + 1))
    if expression == "last week":
        return f"the week before {fmt(day)}"
    if expression == "last weekend":
        return f"the weekend before {fmt(day)}"
    if expression == "two weeks ago":
        return f"two weeks before {fmt(day)}"
    if expression == "last month":
        return _month_shift(day, -1)
    if expression == "next month":
        return _month_shift(day, 1)
    raise ValueError(f"unknown relative expression {expression!r}")


def past_expression(rng: random.Random, said_at: datetime) -> str:
    """A relative expression for something that already happened (unambiguous for its day)."""
    kind = rng.choice(("yesterday", "days", "weekday", "weekday", "last week", "last weekend", "two weeks ago",
                       "last month"))
    if kind == "days":
        return f"{rng.choice(list(NUMBER_WORDS))} days ago"
    if kind == "weekday":  # 2-6 days back: "last Friday" said on a Saturday would be ambiguous
        back = rng.randint(2, 6)
        return f"last {WEEKDAYS[(said_at.weekday() - back) % 7]}"
    return kind


def future_expression(rng: random.Random, said_at: datetime) -> str:
    kind = rng.choice(("tomorrow", "weekday", "next month", "next month"))
    if kind == "weekday":
        ahead = rng.randint(2, 6)
        return f"next {WEEKDAYS[(said_at.weekday() + ahead) % 7]}"
    return kind


@dataclass(frozen=True)
class Message:
    seq: int
    speaker: str
    role: str
    text: str
    occurred_at: datetime
    session: int

    @property
    def content(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    qid: str
    kind: str  # single | multi | temporal | inference
    question: str
    answer: str
    evidence: tuple[int, ...]  # seqs of the messages the answer comes from
    expression: str | None = None  # temporal: the relative expression in evidence[0]


@dataclass
class Conversation:
    conversation_id: str
    user: str  # the speaker with role=user
    assistant: str
    messages: list[Message]
    questions: list[Question]
    user_id: str | None = None  # the messages' user_id (default: u-<conversation_id>)

    @property
    def end_seq(self) -> int:
        return len(self.messages)


@dataclass
class _Line:
    speaker: str
    text: str
    expression: str | None = None


@dataclass
class _Plant:
    """Lines said together in one session; questions refer to them by index."""
    session: int
    lines: list[_Line]
    questions: list[tuple[str, str, str, tuple]] = field(default_factory=list)  # kind, q, answer, ((plant, line),)


class _Story:
    """Writes one person's planted facts; `expr` lines get their date when their session is known."""

    def __init__(self, rng: random.Random, person: str, other: str, dates: list[datetime], used: set[str]):
        self.rng, self.p, self.o, self.dates, self.used = rng, person, other, dates, used
        self.plants: list[_Plant] = []
        self.tags: set[str] = set()

    def pick(self, pool: list[str] | tuple[str, ...]) -> str:
        """A value not used yet in this conversation (so answers are unambiguous)."""
        free = [v for v in pool if v not in self.used] or list(pool)
        value = self.rng.choice(free)
        self.used.add(value)
        return value

    def sessions(self, count: int) -> list[int]:
        """`count` increasing session indexes, spread over the conversation."""
        return sorted(self.rng.sample(range(1, len(self.dates)), count))

    def plant(self, session: int, *lines: _Line) -> _Plant:
        plant = _Plant(session, list(lines))
        self.plants.append(plant)
        return plant

    def ask(self, plant: _Plant, kind: str, question: str, answer: str, *refs: tuple[_Plant, int]) -> None:
        """Evidence `refs`: (plant, line index) pairs; by default the plant's first line."""
        plant.questions.append((kind, question, answer, refs or ((plant, 0),)))

    def say(self, *wordings: str) -> str:
        """One of several wordings of a question: some share words with the evidence, some do not."""
        return self.rng.choice(wordings)

    def event(self, session: int, text: str, reply: str, when: str, *, future: bool = False) -> _Plant:
        """An event told with a relative date (`{expr}` in `text`), a reply, and the question `when`."""
        said_at = self.dates[session]
        expr = future_expression(self.rng, said_at) if future else past_expression(self.rng, said_at)
        plant = self.plant(session, _Line(self.p, text.format(expr=expr), expr), _Line(self.o, reply))
        self.ask(plant, "temporal", when, resolve(expr, said_at))
        return plant


def _pets(s: _Story) -> None:
    first, second = s.sessions(2)
    species, pet = s.pick(V.SPECIES), s.pick(V.PET_NAMES)
    a = s.event(first, f"Big news: we adopted a {species} from the shelter {{expr}}! We named her {pet}.",
                s.rng.choice((f"No way! A {species}? I need photos of {pet} immediately.",
                              "That's wonderful news, congratulations!")),
                s.say(f"When did {s.p} adopt {pet}?", f"When did {pet} join {s.p}'s family?"))
    s.ask(a, "single", s.say(f"What is the name of {s.p}'s {species}?", f"What is {s.p}'s {species} called?",
                                f"What did {s.p} name the {species} from the shelter?"), pet)
    species2, pet2 = s.pick([x for x in V.SPECIES if x != species]), s.pick(V.PET_NAMES)
    b = s.plant(second, _Line(s.p, f"{pet} has company now: we brought home a {species2} called {pet2}."),
                _Line(s.o, "How are the two of them getting along?"),
                _Line(s.p, f"Better than expected, {pet2} follows {pet} everywhere."))
    s.ask(b, "multi", s.say(f"What pets does {s.p} have, and what are their names?",
                               f"Which animals live with {s.p}, and what are they called?"),
          f"{species} {pet} {species2} {pet2}", (a, 0), (b, 0))


def _superseded(s: _Story, sessions: list[int], before: tuple[str, str], after: tuple[str, str], when: str,
                now: tuple[tuple[str, ...], str], both: tuple[tuple[str, ...], str], *, future: bool = False) -> None:
    """A fact (`before`: line, reply), a later event that supersedes it (`after`: line with `{expr}`,
    reply; `when`: its question), then a question on the new state and one that needs both
    (`now`, `both`: wordings, answer)."""
    a = s.plant(sessions[0], _Line(s.p, before[0]), _Line(s.o, before[1]))
    b = s.event(sessions[1], after[0], after[1], when, future=future)
    s.ask(b, "single", s.say(*now[0]), now[1])
    s.ask(b, "multi", s.say(*both[0]), both[1], (a, 0), (b, 0))


def _move(s: _Story) -> None:
    sessions = s.sessions(2)
    old, new = s.pick(V.CITIES), s.pick(V.CITIES)
    _superseded(
        s, sessions,
        (f"The rent here in {old} went up again, our little flat costs a fortune now.",
         "Ugh, that's rough. Are you thinking of leaving?"),
        (f"We finally moved from {old} to {new} {{expr}}. Boxes everywhere!",
         s.rng.choice((f"{new}! How does it feel so far?", "Congratulations on the move!"))),
        s.say(f"When did {s.p} move to {new}?", f"When did {s.p} leave {old}?"),
        ((f"Which city does {s.p} live in now?", f"Where did {s.p} move to?", f"In which city is {s.p}'s new home?"),
         new),
        ((f"Which cities has {s.p} lived in?", f"Where has {s.p} rented a flat, before and after moving?"),
         f"{old} {new}"))


def _job(s: _Story) -> None:
    sessions = s.sessions(2)
    job1, job2 = s.pick(V.JOBS), s.pick(V.JOBS)
    company1, company2 = s.pick(V.COMPANIES), s.pick(V.COMPANIES)
    _superseded(
        s, sessions,
        (f"Long shift at {company1} today. Being a {job1} is rewarding but exhausting.",
         "You need a proper rest this weekend."),
        (f"I handed in my notice at {company1}! I start as a {job2} at {company2} {{expr}}.",
         "That's a big step, I'm proud of you."),
        s.say(f"When does {s.p} start working at {company2}?", f"When does {s.p}'s new job begin?"),
        ((f"What is {s.p}'s new job?", f"Where does {s.p} work now, and as what?",
          f"What job did {s.p} take after leaving {company1}?"), f"{job2} {company2}"),
        ((f"What jobs has {s.p} had?", f"What has {s.p} worked as over the months?"), f"{job1} {job2}"),
        future=True)


def _sibling(s: _Story) -> None:
    first, second = s.sessions(2)
    relative, name, job = s.rng.choice(V.RELATIVES), s.pick(V.NAMES), s.pick(V.JOBS)
    a = s.plant(first, _Line(s.p, f"My {relative} {name} visited, still working as a {job} and loving it."),
                _Line(s.o, f"I remember {name}! Say hi from me."))
    s.ask(a, "single", s.say(f"What does {s.p}'s {relative} do for a living?", f"What is {name}'s job?"), job)
    s.event(second, f"{name} got engaged {{expr}}! The whole family is over the moon.",
            "Oh how lovely, congratulations to them!",
            s.say(f"When did {s.p}'s {relative} get engaged?", f"When did {name} get engaged?"))


def _music(s: _Story) -> None:
    first, second = s.sessions(2)
    instrument, teacher = s.pick(V.INSTRUMENTS), s.pick(V.TEACHERS)
    a = s.plant(first, _Line(s.p, f"I signed up for {instrument} lessons! My teacher, {teacher}, is very patient."),
                _Line(s.o, "That's brilliant, you always wanted to play something."))
    s.ask(a, "single", s.say(f"Which instrument is {s.p} learning?", f"What instrument does {s.p} take lessons on?"),
          instrument)
    s.ask(a, "single", s.say(f"Who teaches {s.p} music?", f"What is the name of {s.p}'s music teacher?"), teacher)
    s.event(second, f"I played at my first {instrument} recital {{expr}}, my hands were shaking.",
            "I bet nobody noticed. Well done!",
            s.say(f"When was {s.p}'s first recital?", f"When did {s.p} first play in front of an audience?"))
    s.tags.add("music")


def _club(s: _Story) -> None:
    first, second = s.sessions(2)
    sport, club, n = s.pick(V.SPORTS), s.pick(V.CLUBS), s.rng.randint(3, 9)
    a = s.plant(first, _Line(s.p, f"I joined a {sport} club, they call themselves the {club}."),
                _Line(s.o, "What a name! How was the first session?"))
    s.ask(a, "single", s.say(f"Which club did {s.p} join?", f"What is the name of {s.p}'s {sport} club?"), club)
    b = s.event(second, f"The {club} won the regional final {{expr}}, we were {n} points ahead!",
                "Champions! You must be thrilled.",
                s.say(f"When did {s.p}'s team win the regional final?", f"When did the {club} win their final?"))
    s.ask(b, "single", s.say(f"By how many points did {s.p}'s team win the final?",
                             f"How big was the winning margin in the {club}' final?"), str(n))
    s.tags.add("sport:" + sport)


def _vehicle(s: _Story) -> None:
    (first,) = s.sessions(1)
    colour, vehicle, price = s.pick(V.COLOURS), s.pick(V.VEHICLES), s.rng.randrange(300, 9000, 50)
    a = s.event(first, f"I bought a {colour} {vehicle} {{expr}}, second hand, {price} euros.",
                "Nice! Take me for a ride sometime.",
                s.say(f"When did {s.p} buy the {vehicle}?", f"When did {s.p} get the second-hand {vehicle}?"))
    s.ask(a, "single", s.say(f"What colour is {s.p}'s {vehicle}?", f"What colour {vehicle} did {s.p} buy?"), colour)
    s.ask(a, "single", s.say(f"How much did {s.p} pay for the {vehicle}?", f"What did {s.p}'s {vehicle} cost?"),
          f"{price} euros")
    s.tags.add("drives")


def _trips(s: _Story) -> None:
    sessions = s.sessions(3)
    places = [s.pick(V.PLACES) for _ in range(3)]
    refs = []
    for session, place in zip(sessions[:2], places):
        sight = s.rng.choice(V.SIGHTS)
        refs.append((s.plant(session, _Line(s.p, f"Just got back from {place}, the {sight} was unreal."),
                             _Line(s.o, "Jealous! Send me the photos.")), 0))
    c = s.event(sessions[2], f"I booked it: I'm flying to {places[2]} {{expr}}!",
                "Finally! You've talked about it for years.",
                s.say(f"When is {s.p} flying to {places[2]}?", f"When does {s.p} leave for {places[2]}?"), future=True)
    s.ask(c, "multi", s.say(f"Which places has {s.p} already been to on trips?",
                            f"Which places has {s.p} been back from?", f"Where has {s.p} travelled so far?"),
          f"{places[0]} {places[1]}", *refs)


INFERENCES = (  # (needs-not tags, evidence, question, answer)
    ((), "I'm allergic to {allergen}, even a trace sends me to hospital.",
     "Could {p} safely eat {dish}?", "allergic {allergen}"),
    ((), "I get horribly seasick, even on the ferry to {island}.",
     "Would {p} enjoy a week-long sailing holiday?", "seasick"),
    ((), "I've been saving for three years to open my own {shop}.",
     "What kind of business might {p} start?", "{shop}"),
    (("sport:trail running",), "My knee surgery is booked, so no running until the autumn.",
     "Could {p} take part in a summer running race?", "knee surgery"),
    (("music",), "I can't stand crowds, stadium concerts are my idea of a nightmare.",
     "Would {p} want tickets to a big stadium concert?", "crowds nightmare"),
    ((), "These days I only read {genre}, I devour them.",
     "What kind of book would make a good present for {p}?", "{genre}"),
    (("drives",), "I never got a driving licence, I cycle everywhere.",
     "Could {p} share the driving on a road trip?", "never driving licence"),
    ((), "I've been vegetarian since I was {age}.",
     "Would {p} order the {meat}?", "vegetarian"),
    (("sport:rock climbing",), "I'm terrified of heights, I couldn't even climb the {tower}.",
     "Would {p} enjoy a hot-air balloon ride?", "terrified heights"),
    ((), "I'm learning {language} so I can talk with my grandmother in {city}.",
     "Which language could {p} use when visiting family in {city}?", "{language}"),
    ((), "My {gear} fell apart on the last hike, I really need new ones.",
     "What would be a useful birthday present for {p}?", "{gear}"),
    ((), "I'm on night shifts for the rest of the year, I sleep until noon.",
     "Could {p} make a weekday breakfast meeting?", "night shifts sleep noon"),
)


def _inference(s: _Story, count: int = 2) -> None:
    usable = [t for t in INFERENCES if not s.tags.intersection(t[0])]
    for _, evidence, question, answer in s.rng.sample(usable, count):
        allergen, dish = s.rng.choice(V.ALLERGIES)
        slots = dict(allergen=allergen, dish=dish, island=s.rng.choice(V.ISLANDS), shop=s.pick(V.SHOPS),
                     genre=s.pick(V.GENRES), age=s.rng.randint(9, 19), meat=s.rng.choice(V.MEAT_DISHES),
                     tower=s.rng.choice(V.TOWERS), language=s.pick(V.LANGUAGES), city=s.pick(V.CITIES),
                     gear=s.pick(V.GEAR), p=s.p)
        (session,) = s.sessions(1)
        plant = s.plant(session, _Line(s.p, evidence.format(**slots)),
                        _Line(s.o, s.rng.choice(("Good to know.", "I didn't know that about you!",
                                                 "Makes sense, honestly."))))
        s.ask(plant, "inference", question.format(**slots), answer.format(**slots))


RESTAURANTS = ["Casa Lumo", "The Tin Pelican", "Osteria Verde", "Le Petit Phare", "Bistro Kalma", "The Saltbox"]
BOARD_GAMES = ["Carcassonne", "Azul", "Wingspan", "Ticket to Ride", "Codenames", "Dixit", "Patchwork"]
STARTERS = ["Doughlores", "Clint Yeastwood", "Breadley", "Bubbles", "Sir Loafalot", "Crumbledore"]


def _asked(s: _Story) -> None:
    """Answers to the other person's questions, given tersely: the words of a later question are
    in the question that was asked then, the answer only in the reply after it (the way people,
    and assistants, answer in chats)."""
    restaurant, game, starter = s.pick(RESTAURANTS), s.pick(BOARD_GAMES), s.pick(STARTERS)
    asked = [
        ("Where did you two end up going for your anniversary dinner?",
         f"{restaurant}, the little place by the river. Perfect evening.",
         s.say(f"Where did {s.p} go for the anniversary dinner?", f"Which restaurant did {s.p} pick for the "
               "anniversary?"), restaurant),
        ("Which board game did you buy for game night in the end?", f"{game}. Everyone got hooked!",
         s.say(f"Which board game did {s.p} buy for game night?", f"What game did {s.p} get for game night?"), game),
        ("Did you ever give your sourdough starter a name?", f"Of course, {starter}. It's basically a pet now.",
         s.say(f"What is {s.p}'s sourdough starter called?", f"What did {s.p} name the sourdough starter?"), starter),
    ]
    for session, (question, reply, later, answer) in zip(s.sessions(2), s.rng.sample(asked, 2)):
        plant = s.plant(session, _Line(s.o, question), _Line(s.p, reply))
        s.ask(plant, "single", later, answer, (plant, 1))


STORIES = (_pets, _move, _job, _sibling, _music, _club, _vehicle, _trips, _asked)


def _small_talk(rng: random.Random, speaker: str, other: str, said: set[int]) -> list[_Line]:
    """A statement not yet made in this session, a fitting reply, sometimes a follow-up."""
    slots = dict(daypart=rng.choice(V.DAYPARTS), chore=rng.choice(V.CHORES), weather=rng.choice(V.WEATHER),
                 food=rng.choice(V.FOODS), show=rng.choice(V.SHOWS), friend=rng.choice(V.FRIENDS),
                 city=rng.choice(V.CITIES), species=rng.choice(V.SPECIES), fpet=rng.choice(V.PET_NAMES),
                 job=rng.choice(V.JOBS), place=rng.choice(V.PLACES), plant=rng.choice(V.PLANTS),
                 gadget=rng.choice(V.GADGETS), podcast=rng.choice(V.PODCASTS), instrument=rng.choice(V.INSTRUMENTS),
                 mood=rng.choice(V.MOODS), topic=rng.choice(V.TOPICS), produce=rng.choice(V.PRODUCE),
                 colour=rng.choice(V.COLOURS), vehicle=rng.choice(V.VEHICLES), genre=rng.choice(V.GENRES),
                 relative=rng.choice(V.RELATIVES), sport=rng.choice(V.SPORTS), shop=rng.choice(V.SHOPS),
                 adj=rng.choice(V.ADJECTIVES))
    index = rng.choice([i for i in range(len(V.SMALL_TALK)) if i not in said] or range(len(V.SMALL_TALK)))
    said.add(index)
    statement, replies, follow_up = V.SMALL_TALK[index]
    lines = [_Line(speaker, statement.format(**slots)), _Line(other, rng.choice(replies).format(**slots))]
    if follow_up and rng.random() < 0.5:
        lines.append(_Line(speaker, follow_up.format(**slots)))
    return lines


def session_dates(rng: random.Random, count: int) -> list[datetime]:
    start = datetime(rng.randint(2019, 2024), rng.randint(1, 12), rng.randint(1, 28), tzinfo=UTC)
    dates, when = [], start
    for _ in range(count):
        when = when + timedelta(days=rng.randint(3, 16))
        dates.append(when.replace(hour=rng.randint(7, 21), minute=rng.randint(0, 59)))
    return dates


def conversation(seed: int, index: int, sessions: tuple[int, int] = (15, 30),
                 turns: tuple[int, int] = (14, 30)) -> Conversation:
    rng = random.Random(f"longconv-{seed}-{index}")
    user, assistant = rng.sample(V.NAMES, 2)
    dates = session_dates(rng, rng.randint(*sessions))
    used: set[str] = {user, assistant}
    plants: list[_Plant] = []
    for person, other in ((user, assistant), (assistant, user)):
        story = _Story(rng, person, other, dates, used)
        for write in rng.sample(STORIES, rng.randint(4, 6)):
            write(story)
        _inference(story)
        plants += story.plants
    by_session: dict[int, list[_Plant]] = {}
    for plant in plants:
        by_session.setdefault(plant.session, []).append(plant)

    messages: list[Message] = []
    where: dict[tuple[int, int], int] = {}  # (id(plant), line) -> seq
    for number, started in enumerate(dates):
        first, second = rng.sample((user, assistant), 2)
        blocks: list[tuple[_Plant | None, list[_Line]]] = []
        own = by_session.get(number, [])
        target, said = rng.randint(*turns) - 4 - sum(len(p.lines) for p in own), set()
        while target > 0:
            block = _small_talk(rng, *rng.sample((user, assistant), 2), said)
            blocks.append((None, block))
            target -= len(block)
        for plant in own:
            blocks.insert(rng.randint(0, len(blocks)), (plant, plant.lines))
        blocks.insert(0, (None, [_Line(first, rng.choice(V.GREETINGS).format(other=second)),
                                 _Line(second, rng.choice(V.GREETING_REPLIES).format(other=first))]))
        blocks.append((None, [_Line(first, rng.choice(V.CLOSINGS)), _Line(second, rng.choice(V.CLOSING_REPLIES))]))
        when = started
        for plant, lines in blocks:
            for i, line in enumerate(lines):
                when += timedelta(seconds=rng.randint(20, 90))
                if plant is not None:
                    where[(id(plant), i)] = len(messages)
                messages.append(Message(len(messages), line.speaker, "user" if line.speaker == user else "assistant",
                                        _AN.sub(r"\1n \2", line.text), when, number))
    questions = []
    for plant in plants:
        for kind, text, answer, refs in plant.questions:
            seqs = tuple(where[(id(p), line)] for p, line in refs)
            expression = refs[0][0].lines[refs[0][1]].expression if kind == "temporal" else None
            questions.append(Question(f"c{index}-q{len(questions)}", kind, text, answer, seqs, expression))
    rng.shuffle(questions)  # asked in an order unrelated to where the answers are
    return Conversation(f"longconv-{seed}-{index}", user, assistant, messages, questions)


def generate(seed: int = 1, conversations: int = 10, sessions: tuple[int, int] = (15, 30),
             turns: tuple[int, int] = (14, 30)) -> list[Conversation]:
    return [conversation(seed, index, sessions, turns) for index in range(conversations)]


def to_jsonl(conversations: list[Conversation]) -> str:
    """Plain message objects (`memory-agent ingest` reads them), one line each, then the questions."""
    import json

    lines = []
    for conv in conversations:
        for m in conv.messages:
            lines.append(json.dumps({"conversation_id": conv.conversation_id, "user_id": conv.conversation_id,
                                     "seq": m.seq, "role": m.role, "content": m.content,
                                     "occurred_at": m.occurred_at.isoformat()}))
    return "\n".join(lines) + "\n"


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jsonl", type=Path, help="write the messages as JSON lines here")
    args = parser.parse_args()
    convs = generate(args.seed, args.conversations)
    if args.jsonl:
        args.jsonl.write_text(to_jsonl(convs))
    for conv in convs:
        print(f"# {conv.conversation_id}: {conv.user} (user) and {conv.assistant} (assistant), "
              f"{len(conv.messages)} messages, {conv.messages[-1].session + 1} sessions")
        for m in conv.messages[:40]:
            print(f"  {m.seq:4d} {m.occurred_at:%Y-%m-%d %H:%M} {m.content}")
        for q in conv.questions:
            print(f"  [{q.kind}] {q.question} -> {q.answer} (evidence {list(q.evidence)})")


if __name__ == "__main__":
    main()
