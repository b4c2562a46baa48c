"""Synthetic English long dialogue for `bench.memory_quality --lang en`: two people chatting over
months, one dated session every one to three weeks, in the spirit of public long-dialogue
memory benchmarks (multi-session persona chat with questions of four kinds).

Each dialogue plants facts in a few turns among small talk, and small talk reuses the facts'
vocabulary (a friend's pet, a coworker's instrument, a poster for some festival) so a word in
common is not enough. Facts change (a new job, a move), events happen on the session's date,
and the questions are paraphrased: single-hop, multi-hop (two sessions: before and after a
change), temporal (when did it happen; what happened on a given date) and open-domain (would
they enjoy something near what they said they like).

The first speaker's lines are rendered as kefu renders a counterpart's message (time label and
sender label); the second speaker's as the assistant's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from runtime.memory.folders import ArchivedMessage

PAIRS = [
    ("Caroline", "Melanie"),
    ("Jon", "Gina"),
    ("Audrey", "Andrew"),
    ("Nate", "Joanna"),
    ("Evan", "Sam"),
    ("Deborah", "Jolene"),
    ("Tim", "John"),
    ("Maria", "Priya"),
]
JOBS = ["nurse", "teacher", "graphic designer", "software engineer", "chef", "photographer", "accountant", "architect"]
COMPANIES = ["Riverside Hospital", "Maple Elementary", "Brightline Studio", "Northwind Labs", "Blue Fern Bistro",
             "Harbor Bank", "Summit Architects", "Cobalt Media"]  # fmt: skip
PETS = ["dog", "cat", "parrot", "rabbit", "turtle", "hamster"]
PET_NAMES = ["Luna", "Biscuit", "Pepper", "Oliver", "Mochi", "Ziggy", "Clover", "Waffles"]
INSTRUMENTS = ["violin", "ukulele", "piano", "cello", "drums", "saxophone", "harp", "banjo"]
EVENTS = ["charity run", "pottery workshop", "jazz concert", "book fair", "food festival", "hackathon",
          "art exhibition", "salsa class"]  # fmt: skip
CITIES = ["Lisbon", "Denver", "Seattle", "Montreal", "Oslo", "Austin", "Dublin", "Melbourne"]
COUNTRIES = ["Japan", "Peru", "Iceland", "Morocco", "Vietnam", "Greece", "Norway", "Kenya"]
BOOKS = ["The Night Circus", "Project Hail Mary", "Circe", "Educated", "The Hobbit", "Little Women"]
HOBBIES = [
    ("hiking", "mountain trail"),
    ("painting", "watercolor landscape"),
    ("gardening", "tomato patch"),
    ("birdwatching", "wetland reserve"),
    ("rock climbing", "bouldering gym"),
    ("baking", "sourdough starter"),
]
SIBLINGS = ["sister", "brother", "cousin"]
FRIENDS = ["Kelly", "Marcus", "Dana", "Omar", "Lucy", "Theo", "Rosa", "Ben"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]  # fmt: skip

SMALL_TALK = [
    ("How was your week?", "Busy but good, I finally got some sleep on Sunday."),
    ("Did you catch the game last night?", "Only the second half, it was a close one!"),
    ("I made soup with whatever was in the fridge.", "Those are the best meals honestly."),
    ("The weather has been so gloomy lately.", "Same here, I keep drinking tea to stay warm."),
    ("Any plans for the weekend?", "Nothing big, maybe a long walk and a movie."),
    ("I started a new podcast about history.", "Nice, send me the name when you remember it."),
    ("My phone screen cracked again.", "Oh no, you should really get a sturdier case."),
    ("Traffic was terrible this morning.", "I'm glad I could work from home today."),
    ("I tried a new coffee place downtown.", "Was it any good? I'm always looking for one."),
    ("I've been trying to drink more water.", "Good idea, I should do the same."),
    ("We watched a documentary about the ocean.", "Those always make me want to travel."),
    ("I cleaned the whole apartment today.", "That feels so satisfying, well done."),
]
# Small talk that names the facts' vocabulary without being the fact.
DISTRACTORS = [
    ("My friend {friend} just adopted a {pet}, it's adorable.", "Aww, pets make everything better."),
    ("I saw a poster for a {event} in {city}, looks fun.", "You should go, those are usually great."),
    ("My coworker plays the {instrument}, he's pretty good.", "Wow, I always wanted to learn an instrument."),
    ("Someone recommended {book} to me but I haven't started it.", "I've heard good things about that book."),
    ("{friend} is thinking about a trip to {country} someday.", "That would be an amazing place to visit."),
    ("My neighbor works as a {job} and has crazy hours.", "That sounds exhausting, respect to them."),
    ("There's a new bakery near {company} where I had lunch.", "I love discovering new lunch spots."),
    ("{friend} keeps sending me videos of people {hobby}.", "Ha, maybe it's a sign you should try it."),
]


@dataclass
class Question:
    text: str
    evidence: list[int]  # message indexes
    kind: str
    asked_at_ms: int | None = None  # when it is asked: what it says relative to that day is dated from it


@dataclass
class Dialogue:
    sessions: list[list[ArchivedMessage]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def messages(self) -> list[ArchivedMessage]:
        return [m for session in self.sessions for m in session]


def _label(at: datetime, name: str) -> str:
    return f"[{at:%Y-%m-%d %H:%M}] [counterpart {name}]"


def generate(rng: random.Random, sessions: int = 20) -> Dialogue:
    """One dialogue of `sessions` sessions (at least 10) and its questions."""
    a, b = rng.choice(PAIRS)
    job1, job2 = rng.sample(JOBS, 2)
    company1, company2 = rng.sample(COMPANIES, 2)
    pet, pet_name = rng.choice(PETS), rng.choice(PET_NAMES)
    instrument = rng.choice(INSTRUMENTS)
    event_a, event_b = rng.sample(EVENTS, 2)
    city_a, city1, city2 = rng.sample(CITIES, 3)
    country, book = rng.choice(COUNTRIES), rng.choice(BOOKS)
    hobby, hobby_place = rng.choice(HOBBIES)
    sibling, sibling_name = rng.choice(SIBLINGS), rng.choice(FRIENDS)
    trip_month = rng.choice(MONTHS)
    # (speaker, fact kind, line, reply): "a" is the first speaker, "b" the second.
    plants = [
        ("a", "job1", f"Work at {company1} has been intense, being a {job1} there is tiring but rewarding.",
         "You're so dedicated, I hope they appreciate you."),
        ("b", "city1", f"I love living in {city1}, the coffee and the people here are great.",
         "It sounds like a lovely place to call home."),
        ("a", "instrument", f"I've been learning to play the {instrument}, practicing every evening after dinner.",
         "That's wonderful, music is such a good outlet."),
        ("b", "pet", f"We adopted a {pet} from the shelter and named it {pet_name}!",
         f"{pet_name} is such a cute name, send pictures!"),
        ("a", "event", f"I went to a {event_a} in {city_a} yesterday, it was so inspiring!",
         "I'm glad you had a great time, you deserved it."),
        ("b", "hobby", f"I've been spending every Sunday {hobby}, my favorite spot is a {hobby_place}.",
         "That sounds so peaceful, I should join you."),
        ("a", "book", f"{book} is my favorite book, I've read it three times now.",
         "I'll add it to my reading list."),
        ("a", "sibling", f"My {sibling} {sibling_name} is getting married next spring, I'm helping with the plans.",
         "Congratulations to them, weddings are so much fun."),
        ("b", "event", f"Today I did my first {event_b}, I'm exhausted but proud.",
         "That's a huge accomplishment, well done!"),
        ("a", "trip", f"I'm planning a trip to {country} in {trip_month}, I've been saving up for months.",
         "That will be the adventure of a lifetime."),
        ("a", "job2", f"Big news, I handed in my notice and accepted a position as a {job2} at {company2}!",
         "Wow, congratulations on the new role!"),
        ("b", "city2", f"We finally moved to {city2}, unpacking boxes all week.",
         "Moving is exhausting, but a fresh start is exciting."),
    ]  # fmt: skip
    # Facts go into sessions in order, at most one per session, changes in later sessions.
    fact_sessions = sorted(rng.sample(range(1, sessions), len(plants)))
    dialogue = Dialogue()
    placed: dict[str, int] = {}
    dates: dict[str, datetime] = {}
    at = datetime(2023, rng.randint(1, 4), rng.randint(1, 28), 9, 0, tzinfo=UTC)
    index = 0
    for s in range(sessions):
        at += timedelta(days=rng.randint(6, 20), hours=rng.randint(0, 10))
        messages: list[ArchivedMessage] = []
        turns = rng.randint(8, 14)
        fact_turn = rng.randrange(turns) if s in fact_sessions else -1
        for t in range(turns):
            when = at + timedelta(minutes=3 * t)
            if t == fact_turn:
                speaker, kind, line, reply = plants[fact_sessions.index(s)]
                placed[f"{speaker}:{kind}"] = index + len(messages) + (0 if speaker == "a" else 1)
                dates[f"{speaker}:{kind}"] = when
                first, second = (line, reply) if speaker == "a" else (reply, line)
            elif rng.random() < 0.35:
                template, answer = rng.choice(DISTRACTORS)
                first = template.format(
                    friend=rng.choice(FRIENDS), pet=rng.choice(PETS), event=rng.choice(EVENTS),
                    city=rng.choice(CITIES), instrument=rng.choice(INSTRUMENTS), book=rng.choice(BOOKS),
                    country=rng.choice(COUNTRIES), job=rng.choice(JOBS), company=rng.choice(COMPANIES),
                    hobby=rng.choice(HOBBIES)[0],
                )  # fmt: skip
                second = answer
            else:
                first, second = rng.choice(SMALL_TALK)
                if rng.random() < 0.5:
                    first, second = second, first
            ms = int(when.timestamp() * 1000)
            messages.append(ArchivedMessage(role="user", text=f"{_label(when, a)} {first}", at_ms=ms))
            messages.append(ArchivedMessage(role="assistant", text=second, at_ms=ms + 60_000))
        dialogue.sessions.append(messages)
        index += len(messages)
    event_day = dates["b:event"]
    dialogue.questions = [
        Question(f"What instrument is {a} learning to play?", [placed["a:instrument"]], "single-hop"),
        Question(f"What is the name of {b}'s {pet}?", [placed["b:pet"]], "single-hop"),
        Question(f"What is {a}'s favorite book?", [placed["a:book"]], "single-hop"),
        Question(f"Which country is {a} planning to visit?", [placed["a:trip"]], "single-hop"),
        Question(f"Who in {a}'s family is getting married?", [placed["a:sibling"]], "single-hop"),
        Question(f"When did {a} go to the {event_a}?", [placed["a:event"]], "temporal"),
        Question(f"When did {b} do the {event_b}?", [placed["b:event"]], "temporal"),
        Question(f"What did {b} do on {event_day.day} {event_day:%B %Y}?", [placed["b:event"]], "temporal"),
        Question(f"What was {a}'s job before joining {company2}?", [placed["a:job1"], placed["a:job2"]], "multi-hop"),
        Question(f"Where did {b} live before moving to {city2}?", [placed["b:city1"], placed["b:city2"]], "multi-hop"),
        Question(f"Where does {a} work now?", [placed["a:job2"]], "multi-hop"),
        Question(f"Would {b} enjoy a weekend trip that includes {hobby}?", [placed["b:hobby"]], "open-domain"),
        Question(f"Does {a} have a musical hobby?", [placed["a:instrument"]], "open-domain"),
    ]
    return dialogue
