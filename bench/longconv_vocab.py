"""Word lists and small-talk templates of the long-conversation generator (bench/longconv.py).

Written for this project, not taken from any dataset. The small talk deliberately reuses the
planted facts' vocabulary (cities, jobs, pets, instruments, places) about *other* people, so a
keyword search meets distractors that share words with the answers. Small talk never states a
fact about the two speakers that a question asks about.
"""

from __future__ import annotations

_ = str.split

NAMES = _("Maren Tobias Ilse Rafael Noor Callum Beatriz Kenji Odile Femi Saoirse Piotr Lucia Anders Yasmin "
          "Matteo Hana Dmitri Ingrid Kwame Elodie Ravi Astrid Teodor Zainab Oskar Mirela Henrik Priya Tomasz")
FRIENDS = _("Greta Bruno Selin Jonah Paulina Esteban Wiebke Amadou Roisin Viktor Leontine Sunil Carmen Dario "
            "Annika Hugo Malin Farid Ottilie Rasmus Nadia Colm Signe Ilan")
CITIES = _("Lisbon Porto Utrecht Ghent Bergen Trieste Valencia Leipzig Krakow Tallinn Galway Bologna Lyon Aarhus "
           "Graz Seville Bristol Malmo Cork Basel Rotterdam Ljubljana Turku Bilbao")
PLACES = ["Iceland", "Morocco", "the Azores", "Patagonia", "Japan", "Norway", "Sicily", "Vietnam", "Scotland",
          "Croatia", "Georgia", "Sardinia", "Jordan", "the Faroe Islands", "Crete", "Slovenia"]
SIGHTS = ["food", "old town", "coastline", "hiking", "night market", "light in the evenings", "harbour at dawn",
          "local bakery", "sea swimming", "view from the hostel"]
JOBS = ["nurse", "carpenter", "pharmacist", "sound engineer", "primary school teacher", "bike mechanic",
        "translator", "veterinary nurse", "architect", "baker", "data analyst", "park ranger", "dental hygienist",
        "tram driver", "librarian", "physiotherapist", "florist", "museum curator", "electrician", "paramedic"]
COMPANIES = ["Harbourline", "Greenleaf", "Nordvik & Co", "Copperkettle", "Bluefin Group", "Oakridge", "Lanternworks",
             "Saltmarsh", "Riverside Trust", "Kestrel", "Maplestone", "Brightwater", "Ironbridge", "Juniper Health"]
SPECIES = ["cat", "dog", "rabbit", "parrot", "tortoise", "hamster", "ferret", "gecko", "guinea pig", "cockatiel"]
PET_NAMES = _("Pixel Biscuit Juniper Mochi Pretzel Clementine Bramble Noodle Waffles Saffron Pickle Ziggy Marlowe "
              "Tofu Ember Chutney Pippin Sprocket Quince Nutmeg Basil Gizmo Truffle Wren")
RELATIVES = ["sister", "brother", "cousin"]
INSTRUMENTS = ["cello", "ukulele", "banjo", "saxophone", "harp", "accordion", "clarinet", "trombone"]
TEACHERS = _("Evander Rosalind Ignatius Philippa Bartholomew Cordelia Leopold Henrietta Ambrose Winifred")
SPORTS = ["rock climbing", "rowing", "fencing", "trail running", "kayaking", "archery", "water polo", "badminton"]
CLUBS = ["Red Kites", "Harbour Otters", "Night Owls", "Granite Goats", "Silver Herons", "Copper Foxes",
         "North Wind", "Lucky Puffins"]
VEHICLES = ["bike", "scooter", "camper van", "car", "canoe", "motorbike", "cargo bike"]
COLOURS = ["mustard yellow", "teal", "burgundy", "olive green", "pale blue", "bright orange", "charcoal grey",
           "lilac"]
GENRES = ["crime novels", "science fiction", "poetry", "historical fiction", "graphic novels", "travel memoirs"]
SHOPS = ["bookshop", "bike repair shop", "plant nursery", "coffee roastery", "record shop", "cheese shop"]
GEAR = ["hiking boots", "rain jacket", "tent", "sleeping bag", "climbing shoes", "head torch"]
LANGUAGES = ["Portuguese", "Polish", "Greek", "Finnish", "Turkish", "Hungarian"]
ALLERGIES = [("peanuts", "the chicken satay with peanut sauce"), ("shellfish", "the seafood paella"),
             ("sesame", "the hummus platter"), ("walnuts", "the walnut and date cake"),
             ("kiwi", "the tropical fruit salad")]
MEAT_DISHES = ["beef stew", "pork belly", "lamb skewers", "chicken schnitzel", "venison pie"]
TOWERS = ["cathedral bell tower", "old lighthouse", "radio tower", "castle keep"]
ISLANDS = ["the island", "the lake island", "the coast"]
SHOWS = ["a Danish crime drama", "that baking competition", "a documentary about octopuses", "a sitcom from the 90s",
         "a series about lighthouse keepers", "a cooking show set in Sicily", "a space opera", "a quiz show"]
FOODS = ["lentil soup", "a huge lasagne", "dumplings", "a mushroom risotto", "fish tacos", "a Thai green curry",
         "shakshuka", "pancakes", "a plum crumble", "roast vegetables", "ramen", "a chickpea stew"]
CHORES = ["cleaning out the garage", "repainting the hallway", "fixing the leaking tap", "sorting old photos",
          "weeding the garden", "doing taxes", "defrosting the freezer", "assembling a wardrobe"]
WEATHER = ["grey and drizzly", "unbelievably windy", "hot and sticky", "foggy every morning", "bright but freezing",
           "stormy", "mild and sunny"]
DAYPARTS = ["morning", "afternoon", "evening", "weekend", "Sunday"]
PLANTS = ["tomatoes", "basil", "a lemon tree", "sunflowers", "chillies", "strawberries", "a fig tree"]
GADGETS = ["phone", "laptop", "coffee machine", "washing machine", "router", "headphones", "kettle"]
PODCASTS = ["history podcast", "true crime podcast", "podcast about language", "science podcast"]
ADJECTIVES = ["lovely", "chaotic", "relaxing", "exhausting", "strange", "productive", "cosy", "long"]
MOODS = ["tired", "cheerful", "restless", "calm", "a bit low", "weirdly energetic"]

# Small talk: (statement, fitting replies, an optional follow-up by the first speaker). The
# statements are about the speaker's own day or about other people's lives.
SMALL_TALK = (
    ("I spent the whole {daypart} {chore}, and I'm only half done.",
     ("Ugh, I know the feeling. Did you at least put music on?", "That sounds like a {adj} {daypart}."),
     "Podcasts, mostly. It helped a bit."),
    ("The weather has been {weather} all week, I barely left the house.",
     ("Same here, I keep cancelling walks.", "At least it's a good excuse to stay in and read."), None),
    ("I made {food} last night and there's enough left for three days.",
     ("Save me a portion!", "You always cook for an army."), "I can't help it, small pots make me nervous."),
    ("Have you seen {show}? I watched four episodes in a row.",
     ("Not yet, is it worth it?", "Yes! The second season is even better."), "Totally, but don't start it late at night."),
    ("My friend {friend} just moved to {city} for work and sounds really happy there.",
     ("Good for {friend}, moving is brave.", "I've heard {city} is lovely in spring."), None),
    ("{friend}'s {species} {fpet} knocked a glass off the table again, I got a video of it.",
     ("Haha, {fpet} has no shame.", "Animals are pure chaos."), "I watched it about ten times."),
    ("{friend} is training to become a {job}, the exams sound brutal.",
     ("Good luck to {friend}, that's a tough path.", "I couldn't do it, honestly."), None),
    ("My colleague {friend} went to {place} and came back with a suitcase full of snacks.",
     ("Did you get to try any?", "That's the best kind of souvenir."), "A few. The salty ones were gone in a day."),
    ("I'm trying to grow {plant} on the balcony, so far it's a sad sight.",
     ("Give it time, it's still early.", "More sun, less water, that's my only advice."), None),
    ("My {gadget} died this morning, right in the middle of everything.",
     ("Classic. Always at the worst moment.", "Did you try turning it off and on again?"), "Twice. It's gone."),
    ("I've been listening to a {podcast} on my walks, it's oddly addictive.",
     ("Send me the name, I need something new.", "I can never focus on podcasts."), None),
    ("{friend} plays the {instrument} in a pub band, I went to hear them once.",
     ("Were they any good?", "I love small pub gigs."), "Better than I expected, the crowd loved them."),
    ("The neighbours got a dog, I hear it every morning at six.",
     ("Earplugs, my friend.", "Maybe it'll calm down once it settles in."), None),
    ("I feel {mood} today, not sure why.",
     ("Some days are just like that.", "Did you sleep badly?"), "Maybe. I'll go to bed early tonight."),
    ("The traffic in town was terrible, it took me an hour to get anywhere.",
     ("They're digging up half the roads again.", "That's why I stopped going in on Fridays."), None),
    ("We had a power cut for two hours, I read by candlelight like in the old days.",
     ("That sounds almost romantic.", "Did the freezer survive?"), "Just about, nothing melted."),
    ("{friend} asked me to help paint a flat in {city} next summer.",
     ("Are you going to say yes?", "Free labour, classic {friend}."), "Probably, if there's pizza involved."),
    ("I finally cleared my inbox, it felt like climbing a mountain.",
     ("Teach me your ways.", "Enjoy it while it lasts!"), None),
    ("There's a new bakery on the corner and I've been there way too often.",
     ("What's the best thing they make?", "That's dangerous, I'd be there every day."), "The cardamom buns, no contest."),
    ("I tried a yoga video this {daypart}, my back is complaining.",
     ("Start with the short ones!", "Give it a week, it gets easier."), None),
    ("{friend} keeps sending me articles about {topic}, I can't keep up.",
     ("Just read the headlines, nobody will know.", "Is any of it interesting?"), "Some of it, to be fair."),
    ("My phone keeps suggesting photos from years ago, it makes me nostalgic.",
     ("Those memories pop-ups get me every time.", "Send me the embarrassing ones."), None),
    ("I went to the market and bought far too many {produce}.",
     ("Jam time?", "Bring some over, I'll help."), "Jam, chutney, anything, there are kilos of them."),
    ("{friend} got a {colour} {vehicle} and won't stop talking about it.",
     ("Ha, the colour alone says a lot.", "Everyone needs a hobby."), None),
    ("I think I need a holiday, even just a few days somewhere quiet.",
     ("You really do, you've been working non-stop.", "Somewhere with no phone signal."), "That sounds like heaven."),
    ("The library had a book sale, I came home with a bag of {genre}.",
     ("How many is a bag?", "You'll need another shelf."), "Eleven. I regret nothing."),
    ("I burned the toast twice this morning, it's that kind of day.",
     ("Third time lucky?", "Maybe stay away from the kitchen today."), None),
    ("{friend}'s {relative} works as a {job} in {city}, I heard all about it at dinner.",
     ("Sounds like an interesting family.", "Did it sound like a good job?"), "Long hours, but they love it."),
    ("I spent an hour on the phone with customer service about my {gadget}.",
     ("An hour? I'd have lost my mind.", "Did they at least fix it?"), "They're sending someone next week."),
    ("It's been ages since I've seen a film in the cinema.",
     ("We should go together, there's a festival soon.", "Same, I always wait for streaming."), None),
    ("{friend} started {sport} and now talks about nothing else.",
     ("Every new hobby is like that for a month.", "Ha, I know someone like that."), None),
    ("We played board games until midnight, I lost every single round.",
     ("Which game?", "Sore loser?"), "Something with trains. I still don't understand the rules."),
    ("I keep meaning to call my old school friends, time just flies.",
     ("Just send a message, it's easier.", "They're probably thinking the same about you."), None),
    ("I've been drinking too much coffee, I should switch to tea.",
     ("You say that every month.", "Green tea is a good middle ground."), "I know, I know."),
    ("{friend} is thinking of opening a {shop} in {city}, which sounds risky.",
     ("Risky, but exciting.", "Does {friend} have any experience?"), "None at all, that's what worries me."),
    ("I found an old box of letters in the attic, some from the 80s.",
     ("Did you read them?", "That's a treasure, keep them safe."), "A few. Some were from my grandparents."),
    ("The wind knocked over our bins again, rubbish all over the street.",
     ("Weigh them down with a brick.", "The wind this year is something else."), None),
    ("I signed up for a cooking class about {food} and burned everything.",
     ("Everyone burns things in those classes.", "Did the teacher laugh?"), "Politely, yes."),
)
TOPICS = ["electric cars", "sleep science", "urban gardening", "ancient Rome", "bird migration", "minimalism"]
PRODUCE = ["apricots", "tomatoes", "cherries", "courgettes", "peaches", "plums"]
GREETINGS = ("Hey {other}! How's it going?", "Hi {other}, long time no talk!", "Morning {other}!",
             "Hello {other}, do you have a minute to chat?", "Hey, it's been a while!")
GREETING_REPLIES = ("Hi {other}! All good here, you?", "Hey! Busy as always, but good.",
                    "Hello! Nice to hear from you.", "Hi! Yes, I was hoping you'd message.")
CLOSINGS = ("Anyway, I have to run. Talk soon!", "I should get going, speak later!",
            "Right, dinner is calling. Bye for now!", "Let's catch up again soon, take care!")
CLOSING_REPLIES = ("Bye! Take care.", "Talk soon!", "See you, have a good one!", "Speak soon!")
