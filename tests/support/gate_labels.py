"""A hand-labelled sample for seed 001's gate: is a slice of conversation worth remembering?

Each case is a short slice (role, content) and the label a careful reader gives it. Written
before measuring, in several styles: user + AI assistant, two named people ("Name: text"),
chatter, questions, technical help. Used by tests/unit/test_extraction_quality.py and
bench/extraction_quality.py to report the gate's accuracy (seed 001 asks for above 80%).
"""

from __future__ import annotations

U, A = "user", "assistant"

GATE_CASES: tuple[tuple[bool, tuple[tuple[str, str], ...]], ...] = (
    # worth remembering: facts, plans, preferences, events, decisions
    (True, ((U, "I live in Lisbon with my wife and two kids."), (A, "Lovely city!"))),
    (True, ((U, "My daughter Ana starts school in September."), (A, "Exciting times."))),
    (True, ((U, "I'm allergic to peanuts, so keep that in mind for recipes."), (A, "Noted."))),
    (True, ((U, "We decided to go with PostgreSQL for the new service."), (A, "Good choice."))),
    (True, ((U, "I prefer short answers without bullet points."), (A, "Understood."))),
    (True, ((U, "I've been working as a nurse for ten years."), (A, "That is a demanding job."))),
    (True, ((U, "My router is a Netgear R7000 on firmware 1.0.11 and it drops WiFi every evening."),
            (A, "Try updating the firmware."))),
    (True, ((U, "Caroline: I went to a LGBTQ support group yesterday and it was powerful."),
            (A, "Melanie: That's great, Caroline!"))),
    (True, ((U, "Caroline: Hey!"), (A, "Melanie: I ran a charity race for mental health last Saturday."))),
    (True, ((U, "Jon: I lost my job as a banker last month, so I'm starting my own dance studio."),
            (A, "Gina: Wow, that's brave!"))),
    (True, ((U, "Gina: My store opened on 12 March and sold out of the red dresses."), (A, "Jon: Congrats!"))),
    (True, ((U, "I usually run 5 km before work on Mondays and Thursdays."), (A, "Nice routine."))),
    (True, ((U, "Our wedding anniversary is on June 14th."), (A, "I'll remember."))),
    (True, ((U, "I'm learning Portuguese because we move to Porto next year."), (A, "Boa sorte!"))),
    (True, ((U, "The deploy failed because the API key for Backblaze expired."), (A, "Rotate the key."))),
    (True, ((U, "Could you remember that my sister Lena is vegetarian?"), (A, "Sure."))),
    (True, ((U, "Tim: I finished reading all seven Harry Potter books this summer."),
            (A, "John: Which one did you like best?"))),
    (True, ((U, "Dad served in the Navy from 1951 to 1953 on the USS Missouri."), (A, "Remarkable."))),
    (True, ((U, "I bought a used Honda Civic for 8,000 euros."), (A, "Good deal."))),
    (True, ((U, "Audrey: My dogs Pepper and Panda love the new park near our house."),
            (A, "Andrew: They must be happy."))),
    # not worth remembering: greetings, thanks, chatter, bare questions, acknowledgements
    (False, ((U, "hi"), (A, "Hello! How can I help?"))),
    (False, ((U, "thanks, that's all"), (A, "You're welcome!"))),
    (False, ((U, "ok"), (A, "Anything else?"), (U, "no, bye"))),
    (False, ((U, "Caroline: Hey Mel! Good to see you!"), (A, "Melanie: Hey Caroline! How have you been?"))),
    (False, ((U, "Caroline: Haha, totally!"), (A, "Melanie: Right? So fun."))),
    (False, ((U, "lol yes"), (A, "Glad you liked it."))),
    (False, ((U, "What's the capital of France?"), (A, "Paris."))),
    (False, ((U, "How do I reverse a list in Python?"), (A, "Use reversed() or list.reverse()."))),
    (False, ((U, "Can you explain that again?"), (A, "Sure, in other words: it repeats."))),
    (False, ((U, "Jon: See you soon!"), (A, "Gina: Bye, take care!"))),
    (False, ((U, "cool, got it"), (A, "Great."))),
    (False, ((U, "Sounds good to me."), (A, "Perfect."))),
    (False, ((U, "Melanie: Wow, that's amazing!"), (A, "Caroline: Thanks so much, Mel!"))),
    (False, ((U, "hmm let me think"), (A, "Take your time."))),
    (False, ((U, "What time is it in Tokyo?"), (A, "It's 9 pm there."))),
    (False, ((U, "Tell me a joke."), (A, "Why did the chicken cross the road?"))),
    (False, ((U, "yes please"), (A, "Here you go."))),
    (False, ((U, "Audrey: Aww, so cute!"), (A, "Andrew: I know, right?"))),
    (False, ((U, "I see."), (A, "Let me know if anything is unclear."))),
    (False, ((U, "Good morning!"), (A, "Good morning! What's on your mind?"))),
)
