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
SIGHTS = ["black sand beach", "old medina", "crater lake", "glacier walk", "night market", "fjord cruise",
          "cliff path", "hot springs", "mountain monastery", "harbour at dawn"]
JOBS = ["nurse", "carpenter", "pharmacist", "sound engineer", "primary school teacher", "bike mechanic",
        "translator", "veterinary nurse", "architect", "baker", "data analyst", "park ranger", "dental hygienist",
        "tram driver", "librarian", "physiotherapist", "florist", "museum curator", "electrician", "paramedic"]
COMPANIES = ["Harbourline", "Greenleaf Clinic", "Nordvik Studios", "Copperkettle Bakery", "Bluefin Analytics",
             "Oakridge Joinery", "Lanternworks", "Saltmarsh Pharmacy", "Riverside Library", "Kestrel Transit",
             "Maplestone Architects", "Brightwater Vets", "Ironbridge Electrics", "Juniper Health"]
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

# Small talk: statements (the speaker's own day, or other people's lives) and replies.
STATEMENTS = (
    "I spent the whole {daypart} {chore}, and I'm only half done.",
    "The weather has been {weather} all week, I barely left the house.",
    "I made {food} last night and there's enough left for three days.",
    "Have you seen {show}? I watched four episodes in a row.",
    "My friend {friend} just moved to {city} for work, she sounds really happy there.",
    "{friend}'s {species} {fpet} knocked a glass off the table again, she sent me a video.",
    "{friend} is training to become a {job}, the exams sound brutal.",
    "My colleague {friend} went to {place} and came back with a suitcase full of snacks.",
    "I'm trying to grow {plant} on the balcony, so far it's a sad sight.",
    "My {gadget} died this morning, right in the middle of everything.",
    "I've been listening to a {podcast} on my walks, it's oddly addictive.",
    "{friend} plays the {instrument} in a pub band, I went to hear them once.",
    "The neighbours got a {species}, I hear it every morning at six.",
    "I feel {mood} today, not sure why.",
    "The traffic in town was terrible, it took me an hour to get anywhere.",
    "We had a power cut for two hours, I read by candlelight like in the old days.",
    "{friend} asked me to help paint a flat in {city} next summer.",
    "I finally cleared my inbox, it felt like climbing a mountain.",
    "There's a new bakery on the corner and I've been there way too often.",
    "I tried a yoga video this {daypart}, my back is complaining.",
    "{friend} keeps sending me articles about {topic}, I can't keep up.",
    "My phone keeps suggesting photos from years ago, it makes me nostalgic.",
    "I went to the market and bought far too many {produce}.",
    "{friend} got a {colour} {vehicle} and won't stop talking about it.",
    "I think I need a holiday, even just a few days somewhere quiet.",
    "The library had a book sale, I came home with a bag of {genre}.",
    "I burned the toast twice this morning, it's that kind of day.",
    "{friend}'s {relative} works as a {job} in {city}, she told me all about it.",
    "I spent an hour on the phone with customer service about my {gadget}.",
    "It's been ages since I've seen a film in the cinema.",
    "{friend} started {sport} and now talks about nothing else.",
    "We played board games until midnight, I lost every single round.",
    "I keep meaning to call my old school friends, time just flies.",
    "The park near me is full of {species} owners in the evening, it's chaos.",
    "I've been drinking too much coffee, I should switch to tea.",
    "{friend} is thinking of opening a {shop} in {city}, which sounds risky.",
)
REPLIES = (
    "Ha, that sounds like a {adj} {daypart}.",
    "Oh no, I hope it gets better soon.",
    "I know the feeling, honestly.",
    "That's funny, I was thinking about the same thing yesterday.",
    "Really? Tell me more next time.",
    "Sounds {adj}. I could do with some of that.",
    "I haven't seen it, is it worth it?",
    "Classic. That always happens at the worst moment.",
    "Good for {friend}! I'd be nervous.",
    "I'd love to try {food} like that one day.",
    "We should plan something together soon.",
    "Same here, the {weather} days are getting to me.",
    "Haha, I can picture it perfectly.",
    "That reminds me, I still owe you a coffee.",
    "Honestly I'd have given up halfway.",
    "Wow. I'm not sure I'd have the patience.",
    "Fair enough, everyone needs a break.",
    "Oh, I've heard good things about that.",
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
