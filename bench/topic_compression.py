"""Seed 004's archive compression ratio (JSON -> gzip -> base64) on a hand-written multi-topic chat.

    python bench/topic_compression.py

Prints markdown tables: the ratio for 10, 20 and 50 consecutive messages of one topic next to
the seed's figures, and the archives the topic fold itself produces for the whole conversation.
"""

from __future__ import annotations

import gzip
import json
import platform
import random
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.topics_memory import (  # noqa: E402
    AssistantMessage,
    CompactionDone,
    CompactionRequested,
    TopicMessage,
    TopicsState,
    UserMessage,
    compression_stats,
    full_history,
    merge_archives,
    step,
)

# (user, assistant) turns, one list per topic; written by hand so gzip sees real prose.
WIFI = [
    ("My home wifi keeps dropping every evening, usually somewhere between eight and ten. During the day it's fine. Any idea what could cause that?",
     "Evening-only drops usually point to interference or congestion rather than a broken router. In the evening your neighbours are home, streaming and gaming, so the 2.4 GHz band gets crowded. Devices like microwaves and baby monitors also tend to run at that time. Could you tell me the router model, whether you use 2.4 GHz, 5 GHz or both, and roughly how many devices are connected at night?"),
    ("It's a TP-Link Archer C6. Both bands are on with the same network name. Probably around fifteen devices in the evening, counting phones, two laptops, the TV and some smart plugs.",
     "Thanks, that helps. With both bands under one name, phones may hop to 2.4 GHz when they are further away, and that band is the one most affected by neighbours. Fifteen devices is not a lot for the C6, so capacity is unlikely to be the problem. As a first test, give the 5 GHz band its own name, for example adding \"-5G\", and connect the laptops and the TV to it. If the drops only happen on 2.4 GHz afterwards, we know where to look."),
    ("Okay, I split them. How do I see which channel the 2.4 GHz network is on?",
     "Log in to the router at http://192.168.0.1 or http://tplinkwifi.net, go to Advanced, then Wireless, then Wireless Settings, and choose the 2.4 GHz tab. The Channel field shows either a number or Auto. While you are there, note the channel width too; on 2.4 GHz it should be 20 MHz in a busy building, because 40 MHz overlaps almost every other network around you."),
    ("It says Auto and the width is 20/40 MHz.",
     "Set the width to 20 MHz first; that alone often stabilises things. For the channel, only 1, 6 and 11 don't overlap on 2.4 GHz. Before picking one, it's worth scanning the neighbourhood. On Android the free app WiFiAnalyzer shows every network and its channel; on a Mac you can hold Option, click the wifi icon and open Wireless Diagnostics, then Window, Scan. Pick whichever of 1, 6 or 11 has the fewest strong networks."),
    ("The scan shows eleven networks on channel 6, four on channel 1 and seven on channel 11. Most of the channel 1 ones are weak.",
     "Then channel 1 is the clear choice. Set it manually instead of Auto, keep the width at 20 MHz and save. The router will restart the wireless radios, so devices disconnect for a few seconds. Auto channel selection on many routers only runs at boot, so it can pick a quiet channel in the morning that is packed by the evening, which would match what you're seeing."),
    ("Done. Should I also change anything on the 5 GHz side?",
     "The 5 GHz band has many more non-overlapping channels and its signal doesn't travel far through walls, so neighbours interfere much less. Leave the width at 80 MHz. If your router offers DFS channels (52 to 144), avoid them for now: when the router detects weather radar it has to leave the channel for a minute, which looks exactly like a random drop. Channels 36 to 48 or 149 to 165 are the safe choices."),
    ("It's on channel 100 at the moment. I never touched that.",
     "That is a DFS channel, so it's worth moving. Pick 36 or 149, depending on what your scan shows as quieter. Radar events are rare in most places, but when they happen every device on that band disconnects at once, and they cluster in certain weather. Then let's watch the network for two or three evenings and see whether the drops are gone or just less frequent."),
    ("Two evenings later: it's much better but the TV still lost connection once yesterday around nine thirty.",
     "Good progress. A single drop on one device can have a different cause. Is the TV on 5 GHz now, and how far is it from the router? Some TVs also have aggressive power saving that turns wifi off during standby or even while an app is paused. If the TV has an Ethernet port and a cable is practical, that's the most reliable fix for a device that streams for hours."),
    ("The TV is in the living room, two walls away from the router, on 5 GHz. No cable possible, the router is in the hallway.",
     "Two walls can cut a 5 GHz signal a lot, especially if one of them is a load-bearing or bathroom wall. In the TV's network settings, look for the signal strength; if it shows one or two bars, the TV is probably switching between bands or retrying a lot. Options are to move the TV to the 2.4 GHz network, which now sits on a clean channel, or to add a mesh node or a powerline adapter near the TV."),
    ("It shows two bars out of four. What's a powerline adapter exactly?",
     "A powerline kit is two plugs that send network traffic over your home's electrical wiring. One plugs in near the router and connects with a short Ethernet cable, the other plugs in near the TV, and the TV gets a cable connection to it. They work well when both sockets are on the same circuit and you avoid power strips with surge protection, which filter the signal out. Real-world speeds of 100 to 300 Mbit/s are common, which is plenty for 4K streaming."),
    ("How do I know if the sockets are on the same circuit?",
     "The quickest way is to look at your fuse box: breakers are often labelled by room. If the hallway and the living room share a breaker, you're fine. If they're on different breakers but the same phase, it usually still works, just slower. Many shops accept returns, so the practical test is to try a kit and check the speed with the TV's built-in network test or a speed test app on a laptop plugged into the second adapter."),
    ("Alternatively, would a mesh system be better? My parents have one and like it.",
     "Mesh is more flexible because it improves coverage for every device, not just the TV, and it doesn't depend on your wiring. The downside is cost and the fact that the nodes talk to each other over wifi, so a node behind two walls may itself get a weak link. Placing the satellite node halfway, for example in the doorway between hallway and living room, solves that. If your only weak spot is the TV, powerline is cheaper; if the bedroom or balcony is also patchy, mesh is the better investment."),
    ("The bedroom is bad too actually. Which mesh would work with my existing router?",
     "Since you have a TP-Link router, the simplest option is a TP-Link OneMesh compatible extender, or a Deco kit used in access-point mode. Check on TP-Link's site whether your Archer C6 hardware version supports OneMesh; the version is printed on the label under the router, for example \"Ver 3.20\". If it does, an extender like the RE330 joins the same network automatically. If not, a two-pack of Deco X20 in access-point mode works with any router."),
    ("The label says Ver 2.0. I think that one doesn't support OneMesh.",
     "Correct, OneMesh support on the C6 started with hardware version 3. In that case I'd go with Deco in access-point mode. You connect the main Deco unit to one of the router's LAN ports, put the Deco app in Access Point mode during setup, and the router keeps handling DHCP and the internet connection. Then turn off the router's own wifi so devices don't bounce between the two networks."),
    ("Should I keep the same network name as now, so I don't have to reconnect everything?",
     "Yes, using the exact same name and password means most devices reconnect on their own. Do it in this order: note the current name and password, set up the Deco with them, then switch off the router's radios. Smart plugs are sometimes picky, because many only support 2.4 GHz and don't like band steering. If one of them refuses to connect, the Deco app lets you turn off the 5 GHz band temporarily while you re-pair it."),
    ("I set it up yesterday. Everything reconnected except the doorbell camera.",
     "Doorbell cameras often store the network's security settings, not only the name and password. Deco defaults to WPA2/WPA3 mixed mode on some firmware versions, while older cameras only understand WPA2-Personal with AES. In the Deco app, go to More, Wi-Fi, Security, and try WPA2-PSK only. Also check the camera's app, because some models need to be re-paired through their own setup flow after any change of access point."),
    ("Changed it to WPA2 and the camera is back. The TV has full bars now.",
     "Excellent, that sounds like everything is in place. To recap the changes: 2.4 GHz fixed on channel 1 at 20 MHz, 5 GHz moved off the DFS range, and two Deco units in access-point mode with the router's wifi off. If something drops again, note the time and which device, and check the Deco app's client list; it shows which node each device was attached to, which makes the next round of troubleshooting much quicker."),
    ("One more question: is it safe to leave the router's admin password as the default?",
     "No, please change it. The default admin password is printed on the label or documented online for every model, so anyone on your network, including a compromised smart plug, could log in and change your settings. Choose a long passphrase, store it in your password manager, and while you're in the settings, turn off remote management and WPS unless you actively use them. Both are common ways in for automated attacks."),
    ("Where is remote management on the Archer?",
     "On the Archer C6 it's under Advanced, System, Administration, in the section called Remote Management. Make sure it's disabled. WPS is under Advanced, Wireless, WPS, and you can switch the WPS PIN off there as well. Since the Deco now handles wifi, WPS on the router only matters if its radios are still on, but turning it off costs nothing."),
    ("Done. Also the Deco app wants to update firmware, should I do it now?",
     "Yes, firmware updates for mesh systems usually fix stability and security problems, and Deco units update one after the other, so the network is only down for a few minutes. Do it at a time when nobody is in a video call, keep the units powered during the update, and don't unplug anything if the lights blink for a while. Afterwards, check that the doorbell camera reconnected, because a firmware update occasionally resets the security mode."),
    ("The update worked, camera still connected. Thanks for walking me through all of this.",
     "You're welcome! You did the careful part: testing one change at a time and reporting back. If you notice slowdowns rather than drops in the future, a speed test near the router and near the satellite is the best first step, since it tells us whether the problem is your internet line or the wifi inside the flat."),
    ("Actually, speeds in the bedroom are only 40 Mbit/s while I get 300 near the router. Is that normal?",
     "Some loss is expected, but 40 out of 300 is more than I'd like. It usually means the satellite unit has a weak link to the main one. In the Deco app, tap the satellite and look at its connection quality; if it says \"fair\" or \"poor\", move it one room closer to the main unit. The satellite should be roughly halfway, with a good signal from the main unit, rather than right next to the area you want to cover."),
    ("It says fair. It's in the bedroom itself right now.",
     "That's the cause. The satellite can only pass on what it receives, so when it sits at the edge of the main unit's coverage, everything behind it is slow. Try the hallway outside the bedroom or a shelf in the living room that has a line of sight towards both areas. After moving it, give it a minute to re-optimise and run the speed test in the bedroom again."),
    ("Moved it to the living room shelf. Bedroom is now 180 Mbit/s and the link says good.",
     "That's a great result: 180 Mbit/s in the bedroom is more than enough for streaming, calls and large downloads at the same time. The living room probably got faster too, since the TV now talks to a node in the same room. I think your network is in very good shape now."),
    ("Last thing: the smart plugs sometimes show offline in their app even though they work. Should I worry?",
     "Usually not. Many cheap smart plugs keep a cloud connection that they refresh only every few minutes, and the app shows them offline if it misses a heartbeat. If they still switch when you use them, the connection is fine. If it bothers you, give them fixed IP addresses in the router's DHCP settings; some plugs behave better when their address never changes, especially after the router restarts."),
    ("How do I give them fixed addresses?",
     "In the Archer's web interface, go to Advanced, Network, DHCP Server, and find the Address Reservation section. Click Add, choose the plug from the list of connected clients or type its MAC address, and pick an address outside the dynamic range, for example 192.168.0.200 and up. Save, then restart the plug by unplugging it for ten seconds so it picks up the reserved address."),
    ("I reserved three addresses. The plugs look stable in the app now.",
     "Perfect. Keep a note of which address belongs to which plug; it makes future troubleshooting simpler. You now have reserved addresses for the plugs, a tidy channel plan, a mesh system placed sensibly and a secured router. Enjoy the calmer evenings!"),
    ("Would a new router in general be better than this setup, long term?",
     "Your setup is solid for now. In a few years a wifi 6E or wifi 7 mesh system would add a third band for the link between the nodes, which keeps speeds high even with many devices. But there is no need to replace working hardware today; the Archer C6 as a modem-router plus the Deco units covers your flat well. Revisit it if your internet plan goes above 500 Mbit/s or you add many new devices."),
    ("Good to know. I'll keep it as is.",
     "Sounds like a plan. If anything changes, for example a new internet contract or a move, just come back and we'll adjust the setup together."),
    ("Oh wait, the camera just dropped again after a power cut this morning.",
     "Power cuts reset everything in a random order, and if the camera boots before the Deco units are ready, it may give up and wait for its own retry timer, which can be an hour on some models. Restart the camera once now that the network is up. If it happens after every power cut, the camera's app may have an option to retry more often, or you can put the router and Deco units on a small UPS so they come back first."),
]

BILLING = [
    ("We're redesigning our billing service. Today it's one Postgres table with a balance column that gets updated in place. We keep hitting disputes where nobody can explain how a balance got to its value.",
     "That's a classic symptom of storing only current state. When a balance is overwritten, the history of how it got there is gone, so every dispute becomes an investigation through application logs. An append-only ledger fixes this: each charge, payment, refund and adjustment is a row that is never updated, and the balance is the sum of the rows. Do you need full event sourcing, or would a ledger table next to your existing model be enough?"),
    ("What's the difference in practice?",
     "A ledger table is event sourcing for one aggregate. You append entries like invoice_issued, payment_received or credit_applied, and you compute balances from them, maybe with a cached balance updated in the same transaction. Full event sourcing goes further: every state change in the service is an event, and all read models are projections. It gives you replay and time travel everywhere, but it also means schema evolution for events, projection rebuilds and more infrastructure. For billing, starting with a ledger usually gives eighty percent of the value."),
    ("Our finance team wants to see the balance of any customer at the end of each month, including months that are already closed.",
     "That requirement fits a ledger very well. Give every entry an effective date and a recorded-at timestamp. The balance at the end of March is the sum of entries with an effective date up to March 31, and an audit question like \"what did we believe on April 3rd\" uses the recorded-at time. Closed months should never change: corrections go in as new entries dated in the current open period, referencing the entry they correct."),
    ("So we never edit a wrong entry, even if it was a typo?",
     "Right. Instead of editing, you post a reversal that cancels the wrong entry and a new entry with the correct amount. It looks heavier, but it's exactly what accountants expect, and it means the sum of the ledger at any past point in time stays reproducible. You can hide reversed pairs in the customer-facing invoice view if they're confusing, while the ledger keeps them."),
    ("How would we store amounts? We use floats right now.",
     "Please move away from floats for money. Store amounts as integers in the smallest currency unit, such as cents, with a currency code next to them, or use Postgres numeric with a fixed scale. Floats can't represent 0.10 exactly, so sums drift by fractions of a cent and reconciliation reports never quite match. Also decide on a rounding rule for taxes and proration, write it down, and apply it in one place in the code."),
    ("We have customers in euro and Swiss francs. Do we convert to one currency?",
     "Keep every entry in its original currency. A customer's balance is per currency, and conversion only happens when you explicitly record an exchange, with the rate and its source stored on the entry. For reporting in a single currency, finance can convert at report time using a rates table. Mixing currencies inside a single balance is one of the hardest bugs to undo later."),
    ("What about concurrency? Two payments for the same customer can arrive at the same time from different webhooks.",
     "Appending entries is naturally concurrent-safe, because inserts don't conflict. The risky part is any rule that depends on the current balance, like \"reject a charge if the balance would go below the credit limit\". For that you need a per-account version: read the account's latest version, compute, then insert with version plus one under a unique constraint on account and version. If two writers race, one gets a constraint violation and retries with fresh data."),
    ("Would a Kafka topic be better than Postgres for the ledger?",
     "For the system of record in billing, I'd keep the ledger in Postgres, because you want transactions, constraints and easy queries for finance. Kafka is a good fit around it: publish each committed entry as an event using an outbox table, so other services such as notifications, analytics or dunning can react. The outbox pattern means the entry and the outgoing message are written in one transaction, and a relay process publishes them afterwards."),
    ("Can you sketch the outbox table?",
     "A minimal version has an id, the aggregate id (the account), the event type, the payload as jsonb, a created_at timestamp and a published_at that is null until the relay sends it. The relay selects unpublished rows ordered by id with FOR UPDATE SKIP LOCKED, sends them to Kafka, and marks them published. Use the account id as the Kafka key so all events of one account stay ordered within a partition. Consumers must be idempotent, since the relay can send a message twice if it crashes between sending and marking."),
    ("How do consumers make themselves idempotent?",
     "Each event carries a unique id, and the consumer records the ids it has applied in the same transaction as its own changes. Before applying an event, it checks whether the id is already there. An alternative for ordered streams is to store the last applied offset or sequence per partition or per aggregate and skip anything at or below it. Both approaches rely on the consumer's write and its bookkeeping being atomic."),
    ("Our invoices are generated monthly. Should an invoice be an event too?",
     "Yes. Treat invoice_issued as an entry that moves amounts from \"unbilled usage\" to \"receivable\", and store the rendered invoice document separately with a reference to that entry. The invoice number sequence should come from the database, gapless if your tax authority requires it, which means allocating it inside the same transaction as the entry. Never regenerate a past invoice from current data; keep the exact document you sent."),
    ("Gapless numbering sounds painful with concurrency.",
     "It is a bottleneck by design, but invoice issuing is rare compared to usage events. Use a small counter table per series, update it with a row lock, and issue the invoice in the same transaction. Throughput of a few hundred invoices per second is easy with that approach. If a transaction rolls back, the counter rolls back too, so no gap appears. Don't use a Postgres sequence for this, since sequences skip values on rollback."),
    ("What about usage-based pricing? We bill API calls per thousand.",
     "Collect raw usage as its own append-only stream, aggregate it per customer and billing period, and post a usage entry to the ledger when the period closes or at a regular interval. Keep the aggregation reproducible: store which raw records went into each usage entry, or at least the window and the counting rule version. When a customer disputes an invoice, you can then show exactly which calls were counted."),
    ("Late usage events arrive sometimes, a few hours after the period closed.",
     "Decide on an explicit policy. A common one is a grace period: the period closes for usage an hour or two after its end, and anything later is counted in the next period with its original timestamp kept for reference. If contracts require exact attribution, you post an adjustment entry for the closed period instead. Either way, make late arrivals visible in a report rather than silently dropping or silently merging them."),
    ("How do we migrate from the balance column to the ledger without downtime?",
     "Run both in parallel for a while. First, create an opening-balance entry per account that matches today's balance column. Then change the write path so every change appends a ledger entry and updates the column in the same transaction. Add a nightly job that compares the column with the ledger sum and alerts on any difference. Once the comparison stays clean for a few weeks, switch reads to the ledger and eventually drop the column."),
    ("The opening balance hides all history before the migration, though.",
     "True, and that's usually acceptable if you keep the old system's data accessible for audits. If you want more, you can backfill historical entries from your payment provider's records and invoices, but expect gaps and mismatches for old corrections that were done by hand. Many teams backfill only the current fiscal year so finance has a complete ledger for the open books, and keep an opening entry at the start of that year."),
    ("What indexes would the ledger need?",
     "Start with a primary key on the entry id, an index on account id plus effective date for balance and statement queries, and a unique constraint on account id plus version if you use the optimistic concurrency scheme. Finance reports often filter by posting period and entry type, so a composite index on those helps month-end closing. Avoid indexing the jsonb metadata until you have an actual query that needs it."),
    ("Monthly balance queries will get slower as the ledger grows, won't they?",
     "They will eventually, which is why ledgers often keep period snapshots. When a month closes, write one closing-balance row per account and currency. A balance at any later date is then the last snapshot plus the entries after it. Because closed months never change, snapshots never need recalculation. With a few million entries per year you may not need this for a long time, but it's easy to add later."),
    ("How would refunds work with the payment provider? Right now we call their API and then update the balance.",
     "Split it into two steps with the ledger as the source of truth. First, record a refund_requested entry or a pending state, then call the provider with an idempotency key derived from that entry's id. When the provider confirms, through the API response or a webhook, post refund_completed. If the call times out, you retry with the same idempotency key, so the customer is never refunded twice."),
    ("And if the webhook never comes?",
     "Run a reconciliation job. Every few minutes it looks for refunds that have been pending longer than a threshold and asks the provider for their status. Daily, it compares the provider's payout reports with the ledger and flags anything that appears on one side only. Pending states that are never resolved are exactly the disputes you're trying to eliminate, so they deserve a dashboard and an alert."),
    ("Should customers see the ledger directly?",
     "Show them a statement, not the raw ledger. A statement groups entries into lines a customer understands: invoices, payments, credits, with a running balance. Internal entries like reversals of typos or currency rounding adjustments can be collapsed. Keep the mapping from statement lines to entry ids though, so support can jump from a customer's question straight to the underlying records."),
    ("Our support agents sometimes give goodwill credits. How do we control that?",
     "Make goodwill credit an entry type that requires a reason code and the agent's id, and set limits per role, for example up to fifty francs without approval. Larger credits go into an approval queue and only hit the ledger once approved. Reporting on credits by agent and reason each month usually reveals product issues, because the same reasons show up again and again."),
    ("What tests would you write for the new ledger?",
     "Property-based tests are very effective here: generate random sequences of charges, payments, refunds and reversals, and check invariants such as \"the balance equals the sum of entries\", \"a reversed entry plus its reversal sums to zero\" and \"closed periods never change\". Add a replay test that rebuilds balances from an exported ledger and compares them with the snapshots. And test the concurrency path with two writers racing on the same account."),
    ("This is a lot. Where would you start next sprint?",
     "Start with the ledger table, integer amounts with currency, the opening-balance migration and dual writes with the nightly comparison. That alone makes disputes explainable from day one of the rollout. Outbox, snapshots, refund states and approval flows can follow one by one, each as a small change on top of the ledger."),
    ("Could you write the ledger table DDL as a starting point?",
     "Here's a starting point in words so you can adapt names: a ledger_entries table with id bigint generated always as identity, account_id uuid not null, currency char(3) not null, amount_minor bigint not null, entry_type text not null, effective_date date not null, recorded_at timestamptz not null default now(), reverses_entry_id bigint null referencing ledger_entries, reason text null, created_by text not null, and metadata jsonb not null default '{}'. Add a check that amount_minor is not zero and the index on account_id, effective_date."),
    ("Thanks. I'll draft an ADR with this and share it with the team.",
     "Great idea. In the ADR, state the problem in terms of the disputes you've had, list the options you considered, including staying with the balance column plus an audit log, and make the money representation and the correction policy explicit decisions. Those two choices are the hardest to change later, so it's worth getting explicit agreement on them."),
    ("One concern from the team: won't storing every entry forever cost a lot?",
     "Ledger rows are small, a few hundred bytes each with indexes. Even ten million entries a year is a few gigabytes, which is cheap compared to the cost of one badly handled dispute. Legal retention rules for financial records are often ten years anyway. If storage becomes a concern much later, old closed periods can move to cheaper partitions or an archive table while the snapshots stay online."),
]

TRIP = [
    ("We're thinking about a long weekend in Lyon in May, coming from Geneva. Train or car?",
     "Train is usually the more relaxed option. Direct TER trains from Geneva Cornavin to Lyon Part-Dieu take about two hours, and there's no parking to worry about in Lyon, where central parking is expensive and the old town is mostly pedestrian. A car only makes sense if you want day trips to the Beaujolais villages or the Alps during the weekend."),
    ("We might want one day in the Beaujolais. Can we do that without a car?",
     "It's possible but limited. Regional trains go to Villefranche-sur-Saône in about thirty minutes, and from there you need a taxi, a bike or a tour to reach the villages. Several small companies run day tours from Lyon with tastings at two or three domaines, which also solves the question of who drives after tasting wine. Renting a car just for that one day in Lyon is another good compromise."),
    ("Where should we stay? First time in Lyon.",
     "For a first visit, the Presqu'île between the two rivers is the most convenient: everything is walkable, including the old town across the Saône. Vieux Lyon itself is charming but noisy at night on weekends and has many stairs. If you prefer a quieter neighbourhood with good restaurants, look at Croix-Rousse, which is one metro stop up the hill from the centre."),
    ("What are the must-eat things?",
     "Have at least one dinner in a bouchon, the traditional Lyon restaurants: try quenelles de brochet with Nantua sauce, saucisson brioché or a salade lyonnaise with lardons and a poached egg. Go to the Halles Paul Bocuse market for a morning snack of oysters or cheese, and try a praline tart for dessert. Check that the bouchon carries the \"Authentique Bouchon Lyonnais\" label; some places in the old town are tourist traps."),
    ("Do we need reservations for the bouchons?",
     "For Friday and Saturday dinners, yes, especially for the well-known ones, and ideally a week or two ahead. Lunch is easier and often cheaper with a fixed menu. Many bouchons have only one or two sittings in the evening, around seven thirty and nine, so plan around that."),
    ("When should we book the train?",
     "TER regional tickets have a fixed price, so there's no advantage in booking early, and you can buy them the same day. The price from Geneva is around thirty to forty euros each way. If you travel on a weekend with two or more people, ask about group or weekend discounts in the SNCF Connect app. The Swiss side sometimes sells cheaper combined tickets through the SBB app, so compare both."),
    ("Any museum you'd recommend if it rains?",
     "The Musée des Confluences is worth it for the building alone, and its collections on natural history and human societies suit a rainy afternoon. The Musée des Beaux-Arts is excellent and less crowded than you'd expect. For something unusual, the Musée Miniature et Cinéma in the old town has film sets and props, and it's small enough for an hour or two."),
    ("And the traboules I read about?",
     "Traboules are passageways through buildings that connect parallel streets, mostly in Vieux Lyon and Croix-Rousse. Many are private courtyards that residents allow visitors to walk through during the day, so keep your voice down. The tourist office sells a small map, and the one at 54 rue Saint-Jean is the longest and easiest to find. In Croix-Rousse, the Cour des Voraces has a spectacular staircase."),
    ("Is the Fourvière hill worth the climb?",
     "Yes, the view over the city from the basilica's terrace is the best in Lyon, especially in the late afternoon. You don't have to climb: the funicular from Vieux Lyon takes two minutes and uses a normal metro ticket. Walk down through the Jardin du Rosaire afterwards; it's a pleasant path that ends near the cathedral in the old town."),
    ("We'll probably arrive on Friday around noon. Can you propose a rough plan?",
     "Friday: drop your bags, lunch near the hotel, then walk the Presqu'île from Place Bellecour to the Terreaux and the town hall, and take the funicular to Fourvière for sunset. Dinner in a bouchon. Saturday: morning at the Halles Paul Bocuse, then Croix-Rousse and its traboules, afternoon at the Confluences museum or along the Rhône banks, dinner in Croix-Rousse. Sunday: Beaujolais day tour or car trip, then the evening train back."),
    ("Sunday evening trains back to Geneva, are they crowded?",
     "They can be, because many Geneva commuters and students travel back on Sunday evening. TER seats can't be reserved, so arrive at Part-Dieu twenty minutes early and walk to the front or back of the train, which fill last. If you'd rather have a guaranteed seat, the TGV Lyria service via Geneva is reservable, but it's rarer and more expensive."),
    ("Thanks, that's a great plan. We'll book the hotel this week.",
     "Enjoy Lyon! If you want, send me the hotel's neighbourhood once you've booked, and I'll suggest a couple of bouchons and a good breakfast place within walking distance."),
    ("We booked a small hotel near Place des Terreaux.",
     "Great location: the Terreaux is between the Presqu'île and the slopes of Croix-Rousse. For breakfast, the streets around the Opéra have good bakeries and cafés. For a bouchon nearby, look along rue Mercière and rue des Marronniers, but read recent reviews, since that area has both excellent places and tourist menus. Saturday morning you can walk up the Montée de la Grande Côte to Croix-Rousse directly from your hotel."),
    ("Last question: will shops be open on Sunday?",
     "Most shops in Lyon are closed on Sundays, apart from bakeries in the morning, some food shops and a few places in the old town catering to tourists. The Saint-Antoine market along the Saône runs on Sunday mornings, though, and it's lovely for a picnic shopping before you head out to the Beaujolais."),
]

BAKING = [
    ("My grandmother's apple pie recipe uses regular flour. My sister is now gluten-free. Can I adapt it?",
     "Yes, apple pie adapts well because the filling is naturally gluten-free, apart from any flour used to thicken it. For the crust, use a gluten-free flour blend that contains xanthan gum, or add about half a teaspoon per cup of blend yourself. Could you share the crust part of the recipe, so I can suggest exact quantities?"),
    ("Crust: 300 g flour, 200 g cold butter, a pinch of salt, 2 tablespoons sugar, and ice water until it holds together.",
     "For the gluten-free version, use 300 g of a blend such as rice flour with potato and tapioca starch, plus 1.5 teaspoons of xanthan gum if the blend has none. Keep the butter at 200 g, and add one egg yolk: it helps the dough hold together, which gluten normally does. Expect to need a bit more water, since rice flour absorbs more. The dough will feel softer and more fragile than you're used to."),
    ("How do I roll it without it cracking?",
     "Roll it between two sheets of baking paper instead of on a floured surface, and keep it cold: if it starts to feel greasy, slide it onto a tray and chill it for ten minutes. When it's the right size, peel off the top sheet, flip the dough into the dish and peel off the second sheet. Cracks can be pressed together with your fingers; gluten-free dough doesn't get tough from handling, which is one advantage."),
    ("The filling uses a tablespoon of flour. What do I use instead?",
     "Cornstarch or tapioca starch both work. Use about two teaspoons of cornstarch instead of the tablespoon of flour, since starch thickens more strongly. Tapioca gives a glossier, clearer filling, cornstarch a slightly creamier one. Mix it with the sugar before tossing the apples so it doesn't form lumps."),
    ("Grandma used Boskoop apples. Those are hard to find here.",
     "Boskoop is tart and holds its shape, which is why it works so well. Good substitutes are Granny Smith, Braeburn or Gravenstein; a mix of a tart apple and a sweeter one like Jonagold also gives a nice depth. Avoid Golden Delicious on their own, since they collapse into mush. If your apples are sweeter than Boskoop, reduce the sugar a little and add a squeeze of lemon."),
    ("Should I blind-bake the bottom crust?",
     "For a double-crust apple pie it isn't necessary, but gluten-free crusts are more prone to a soggy bottom. A good compromise is to bake the pie on a preheated baking sheet on the lowest rack for the first twenty minutes at 210 °C, then move it up and lower the oven to 180 °C. Brushing the bottom crust with a little beaten egg white before adding the filling also helps seal it."),
    ("How do I know when it's done?",
     "The crust should be golden, and the filling should bubble thickly through the vents, not just at the edges. That bubbling means the starch has reached a high enough temperature to thicken. In total it usually takes fifty to sixty minutes. If the edges brown too quickly, cover them with a ring of foil for the last part of the bake."),
    ("It's for Sunday. Can I make it the day before?",
     "Yes. Apple pie is actually easier to slice after resting for several hours, because the filling sets as it cools. Bake it on Saturday, let it cool completely, and keep it covered at room temperature. Before serving, warm it for fifteen minutes at 160 °C if you like it warm. Gluten-free crusts can go slightly stale faster, so don't bake it more than a day ahead."),
    ("Could I freeze the dough instead, and bake on Sunday morning?",
     "Freezing the dough works well: wrap the discs tightly and thaw them overnight in the fridge. Roll it while it's still cool. You could also assemble the whole pie, freeze it unbaked and bake it from frozen, adding about twenty minutes to the time. That's handy if Sunday morning is busy, but check the crust colour more carefully, because frozen pies can brown on top before the filling is hot."),
    ("My sister is also careful about cross-contamination. Anything I should watch?",
     "Good that you ask. Use clean baking paper and tins, and wash any rolling pin, sieve or board that was used with wheat flour. Flour dust stays in the air and settles on surfaces, so if you bake anything else with regular flour that day, do the gluten-free pie first. Check labels on the butter-free items too: baking powder, spices and oats can contain traces of gluten."),
    ("The pie was a success! My sister couldn't tell it was gluten-free.",
     "That's wonderful to hear, congratulations! Your grandmother's recipe lives on in a new version. Write down exactly which flour blend and apples you used this time, so you can repeat it; gluten-free blends vary a lot between brands."),
    ("Next time I'd like to try a lattice top. Any tips for gluten-free?",
     "Lattice is harder with gluten-free dough because the strips break easily. Cut the strips on the baking paper, chill them until firm, and lift each one with a bench scraper or the paper itself. Instead of weaving, you can lay the strips in one direction and then the other; it looks almost the same and needs far less handling. A brush of egg wash gives the lattice a nice shine."),
]

MIGRATION = [
    ("Our Alembic migration fails in production with: psycopg.errors.LockNotAvailable: canceling statement due to lock timeout. It worked in staging.",
     "That error means the migration waited for a lock longer than lock_timeout allows. In staging nothing else holds locks on that table, while in production long-running queries or open transactions do. Which statement failed? An ALTER TABLE that adds a column with a default, a new index, or a foreign key are the usual suspects."),
    ("It's ALTER TABLE orders ADD COLUMN shipped_at timestamptz.",
     "Adding a nullable column without a default is fast in Postgres, but it still needs an ACCESS EXCLUSIVE lock on orders for a moment. If any transaction has the table open, for example a long report or an idle-in-transaction session, the ALTER waits behind it, and worse, every new query on orders queues behind the ALTER. Your lock_timeout protected you from a full outage by canceling it."),
    ("How do I find what was holding the lock?",
     "Query pg_stat_activity joined with pg_locks while the migration is waiting, or use pg_blocking_pids(pid) on the migration's backend. Look for sessions with state 'idle in transaction' or queries that have been running for minutes on orders. In many applications the culprit is a background job that opens a transaction, reads some rows and then calls an external API before committing."),
    ("Found it: a nightly export runs a SELECT over orders that takes twenty minutes.",
     "That explains it. Options are to run the migration outside the export window, to make the export read from a replica, or to have the export use shorter transactions, for example paging by primary key with a commit per page. For the migration itself, keep lock_timeout low, say five seconds, and add a retry loop: the ALTER either gets its lock quickly or gives up without blocking other traffic, and tries again a few seconds later."),
    ("Can Alembic do that retry?",
     "Not out of the box, but you can wrap the migration. Set the timeout with op.execute(\"SET lock_timeout = '5s'\") at the start of the upgrade function, and run alembic upgrade from a small script that catches LockNotAvailable and retries a few times with a pause. Since each Alembic migration runs in a transaction by default, a failed attempt rolls back cleanly, and the version table isn't updated."),
    ("The next migration adds an index on orders(customer_id). Anything special?",
     "Yes, use CREATE INDEX CONCURRENTLY, which doesn't block writes. In Alembic that's op.create_index(..., postgresql_concurrently=True), but it can't run inside a transaction, so wrap it in with op.get_context().autocommit_block():. If a concurrent build fails, it leaves an invalid index behind, so check pg_index for indisvalid = false and drop it before retrying."),
    ("We also want to make shipped_at NOT NULL later, after backfilling.",
     "Do it in steps to avoid a long lock. Backfill in batches of a few thousand rows with a commit per batch. Then add a CHECK (shipped_at IS NOT NULL) constraint as NOT VALID, which is instant, and run ALTER TABLE ... VALIDATE CONSTRAINT, which only takes a light lock while scanning. From Postgres 12 on, SET NOT NULL can use the validated check constraint and skip the full scan, after which you can drop the check."),
    ("How big should the backfill batches be?",
     "Aim for batches that finish in well under a second, so they never hold row locks long enough to bother the application. On a typical table, a few thousand rows per batch is a good start; measure and adjust. Order by primary key, remember the last id you processed, and sleep a little between batches if replication lag on your replicas starts to grow."),
    ("Should the backfill be part of the migration itself?",
     "I'd keep data backfills out of schema migrations. Migrations should be fast and predictable, because deploys wait for them. A backfill that takes an hour belongs in a separate job or management command that can be paused, resumed and monitored. The migration that adds the NOT NULL constraint then runs in a later release, after the backfill has finished and been verified."),
    ("Our deploy runs migrations before the new code starts. Is that order right for adding columns?",
     "For adding a nullable column, yes: old code ignores the new column, new code starts using it. For removing or renaming columns the order must be reversed, or split over several releases: first deploy code that no longer uses the column, then drop it in a later migration. Renames are best done as add new column, dual write, backfill, switch reads, and finally drop the old one."),
    ("How can we test migrations against production-like locks before deploying?",
     "Restore a recent anonymised snapshot into a staging database and run a load generator that mimics your busiest queries, including the nightly export, while you apply the migration. Also run a linter like squawk or the one in Django's community tooling against the migration SQL; they catch common locking mistakes such as adding a foreign key without NOT VALID or building an index without CONCURRENTLY."),
    ("We tried again at 6 am with lock_timeout 5s and it went through in 40 ms.",
     "Great, that's the expected behaviour when nothing long-running holds the table. Keep the timeout and retry in place for future migrations; it turns the worst case from an outage into a failed deploy you can simply rerun. And consider moving that export to a replica, since it will keep colliding with maintenance otherwise."),
    ("One more: the export on the replica sometimes gets canceled with 'conflict with recovery'.",
     "That happens when the primary removes row versions that the long query on the replica still needs, and the replica has to replay that cleanup. You can set hot_standby_feedback = on on the replica, which tells the primary to keep those rows, at the cost of some table bloat during long queries. Alternatively raise max_standby_streaming_delay for that replica if it's dedicated to reporting and can lag behind."),
    ("We have a dedicated reporting replica, so the delay option sounds good.",
     "Then set max_standby_streaming_delay to something like thirty minutes on that replica only and monitor its replication lag. Reports will occasionally see slightly older data while a long query runs, which is usually fine for a nightly export. Keep the production read replicas at the default, so they stay close to the primary."),
]

CAT = [
    ("We adopted a cat from the shelter last week. She's called Miso and she hides under the bed all day.",
     "That's very normal for the first days or weeks, especially for a cat coming from a shelter. Hiding is how she feels safe while she learns the new smells and sounds. Let her keep the hiding place, and make sure food, water and a litter box are close to it, so she doesn't have to cross the whole flat to reach them."),
    ("She eats at night, I see the bowl is empty in the morning. But she never comes out when we're around.",
     "Eating is a good sign: she's stressed, but not so much that she stops eating. Spend quiet time in the room without trying to reach her. Sit on the floor, read or look at your phone, and talk softly now and then. Let her choose when to approach. Slow blinking at her is a friendly signal in cat language, and some shy cats blink back after a while."),
    ("Should we try treats to lure her out?",
     "Yes, but gently. Place a treat a little distance from the bed and move away, so the reward comes without pressure. Over several days, put the treats a bit closer to where you sit. Lickable treats on a spoon work well once she comes closer, because she can eat while you stay still. Avoid picking her up or pulling her out; that can set her back by days."),
    ("Our kids are six and nine and very excited. How do we keep them calm?",
     "Explain to them that Miso is scared and needs to decide by herself when to be friends. Give them a job, like putting the treat in the right spot or being the quiet reader in the room. A good rule is \"we let Miso come to us, we never go to Miso\". Short calm visits are better than long noisy ones. Let them see that she eats the treat they placed: it's a success they can enjoy."),
    ("Is it okay that she hasn't used the litter box during the day?",
     "It's okay as long as she uses it at all. Many shy cats only use it at night when the house is quiet. Check it in the morning for normal urine clumps and stool. If she hasn't urinated for more than a day, or you see her straining, call a vet, because urinary problems in cats can become urgent quickly, especially under stress."),
    ("She peed yesterday night, all good. Any toys that help shy cats?",
     "Wand toys with feathers or a fabric strip are ideal, because you can play from a distance while she stays near her safe spot. Move the toy like prey: slowly, hiding behind furniture, then a sudden dash. Even watching counts as progress. Play sessions at dusk, when cats are naturally active, often get the first reactions."),
    ("Tonight she played with the wand for a few minutes! She came halfway out from under the bed.",
     "That's a big step, well done! Play is a sign that she feels safe enough to be curious. Keep sessions short and end while she's still interested, ideally with a treat as a \"catch\". Over the next days, you can drag the toy a little further into the room each time, so she gradually explores beyond the bed."),
    ("Should we use one of those pheromone diffusers?",
     "They can help some cats, and they're harmless to try. Plug it into the room where she spends most of her time, not behind furniture, and give it at least two weeks before judging. They work best alongside what you're already doing: a predictable routine, quiet time, play and treats. Don't expect a sudden change from the diffuser alone."),
    ("When can we let her explore the rest of the flat?",
     "Once she comes out and moves around her room confidently while you're there, open the door and let her explore at her own pace, while keeping her room available as a retreat. Close doors to places where she could get stuck, such as behind the washing machine. Some cats explore only at night at first. Don't move her litter box or food yet; familiar anchors help."),
    ("Two weeks later: she sleeps on the sofa now and lets the kids pet her head.",
     "That's lovely progress in just two weeks! Keep the petting short and watch her tail and ears; if the tail starts to swish or the ears turn sideways, it's time to stop. Let the kids offer a hand for her to sniff first. You have clearly given her exactly the kind of patient start that shy cats need."),
    ("The vet check is next month. How do we get her into the carrier without trauma?",
     "Start now: leave the carrier open in the living room with a soft blanket inside and put treats or her meals near it, then inside. Cats that see the carrier as furniture walk in on their own. On the day, close the door calmly once she's inside, cover it with a towel in the car and keep the radio low. Ask the vet whether they have a cat-only waiting area or appointment times."),
    ("She already sleeps in the carrier sometimes. Amazing.",
     "Perfect, that's the best possible situation for the vet day. Keep the carrier out even after the visit, so the association stays positive. Miso is lucky to have landed with such a thoughtful family."),
]

TOPICS = {"wifi": WIFI, "billing": BILLING, "trip": TRIP, "baking": BAKING, "migration": MIGRATION, "cat": CAT}
SEED = {10: ("8.2 KB", "1.1 KB", 0.866), 20: ("16.5 KB", "2.3 KB", 0.861), 50: ("41.2 KB", "5.8 KB", 0.859)}


def conversation(seed: int = 4) -> list[tuple[str, str, str]]:
    """The six topics interleaved in runs of 2-6 turns, like a real chat: (topic, role, content)."""
    rng = random.Random(seed)
    cursors = {name: 0 for name in TOPICS}
    out: list[tuple[str, str, str]] = []
    while any(cursors[n] < len(t) for n, t in TOPICS.items()):
        name = rng.choice([n for n, t in TOPICS.items() if cursors[n] < len(t)])
        for _ in range(rng.randint(2, 6)):
            if cursors[name] < len(TOPICS[name]):
                user, assistant = TOPICS[name][cursors[name]]
                out += [(name, "user", user), (name, "assistant", assistant)]
                cursors[name] += 1
    return out


def as_messages(chat: list[tuple[str, str, str]], start: float = 1_746_000_000.0) -> list[TopicMessage]:
    return [TopicMessage(seq, role, text, start + 40.0 * seq) for seq, (_, role, text) in enumerate(chat)]


def windows_table(chat: list[tuple[str, str, str]]) -> str:
    """Every run of N consecutive messages of one topic that starts at a user message."""
    messages = as_messages(chat)
    by_topic: dict[str, list[TopicMessage]] = {}
    for (name, _, _), message in zip(chat, messages):
        by_topic.setdefault(name, []).append(message)
    rows = ["| Messages | Windows | JSON (mean) | gzip | gzip + base64 | Ratio gzip | Ratio stored (gzip+b64) "
            "| Seed: uncompressed → compressed, ratio |",
            "|---|---|---|---|---|---|---|---|"]
    for n in (10, 20, 50):
        stats = [compression_stats(ms[i:i + n]) for ms in by_topic.values() for i in range(0, len(ms) - n + 1, 2)]
        raw, packed, stored = (statistics.mean(getattr(s, f) for s in stats)
                               for f in ("json_bytes", "gzip_bytes", "base64_bytes"))
        gz = [s.gzip_ratio for s in stats]
        b64 = [s.stored_ratio for s in stats]
        seed_raw, seed_packed, seed_ratio = SEED[n]
        rows.append(f"| {n} | {len(stats)} | {raw / 1000:.1f} KB | {packed / 1000:.1f} KB | {stored / 1000:.1f} KB "
                    f"| {statistics.mean(gz):.1%} ({min(gz):.1%}–{max(gz):.1%}) "
                    f"| {statistics.mean(b64):.1%} ({min(b64):.1%}–{max(b64):.1%}) "
                    f"| {seed_raw} → {seed_packed}, {seed_ratio:.1%} |")
    return "\n".join(rows)


def controls_table(chat: list[tuple[str, str, str]]) -> str:
    """Two ways to get nearer the seed's figures: its JSON spelling, and repeated text."""
    messages = [m for m, (name, _, _) in zip(as_messages(chat), chat) if name == "wifi"][:50]

    def seed_style(ms: list[TopicMessage]) -> tuple[int, int]:  # json.dumps defaults, no seq
        raw = json.dumps([{"role": m.role, "content": m.content, "timestamp": m.timestamp} for m in ms]).encode()
        return len(raw), len(gzip.compress(raw, mtime=0))

    rows = ["| 50 messages of one topic | JSON | gzip | Ratio gzip | Ratio stored (gzip+b64) |", "|---|---|---|---|---|"]
    for label, (raw, packed) in [
        ("this archive format", (lambda st: (st.json_bytes, st.gzip_bytes))(compression_stats(messages))),
        ("seed-style json.dumps (ASCII escapes, no seq)", seed_style(messages)),
        ("the first 10 messages repeated 5 times", seed_style(messages[:10] * 5)),
    ]:
        stored = 4 * -(-packed // 3)
        rows.append(f"| {label} | {raw / 1000:.1f} KB | {packed / 1000:.1f} KB | {1 - packed / raw:.1%} "
                    f"| {1 - stored / raw:.1%} |")
    return "\n".join(rows)


def embedding(rng: np.random.Generator, base: np.ndarray) -> list[float]:
    """Stand-in for a sentence embedding: the topic's direction plus noise (cosine ~0.9)."""
    return list(base + rng.normal(0.0, 0.05, base.size))


def fold_table(chat: list[tuple[str, str, str]]) -> str:
    """Run the whole chat through the topic fold; confirm each compaction; report the archives."""
    rng = np.random.default_rng(4)
    bases = {name: v / np.linalg.norm(v) for name, v in ((n, rng.normal(size=64)) for n in TOPICS)}
    state, archives, owner, requests = TopicsState("bench"), {}, {}, 0
    for message, (name, role, _) in zip(as_messages(chat), chat):
        now = message.timestamp
        item = (UserMessage(message.seq, message.content, embedding(rng, bases[name]), now) if role == "user"
                else AssistantMessage(message.seq, message.content, now))
        state, commands = step(state, item, now)
        for command in commands:
            if isinstance(command, CompactionRequested):
                requests += 1
                archives[command.topic_id] = merge_archives(archives.get(command.topic_id),
                                                            command.messages_to_archive)
                state, _ = step(state, CompactionDone(command.topic_id, command.upto_seq, "summary"), now)
            owner.setdefault(getattr(command, "topic_id", None), set()).add(name)
    rows = ["| Topic | Title (first 40 chars) | Archived | Active | JSON | gzip + base64 | Ratio stored |",
            "|---|---|---|---|---|---|---|"]
    for topic in state.topics:
        history = full_history(archives.get(topic.topic_id), topic.messages)
        assert [m.seq for m in history] == sorted(m.seq for m in history) and len(history) == topic.message_count
        stats = compression_stats(history[: topic.archived_count])
        ratio = f"{stats.stored_ratio:.1%}" if topic.archived_count else "–"
        rows.append(f"| {topic.topic_id} | {topic.title[:40]} | {topic.archived_count} | {len(topic.messages)} "
                    f"| {stats.json_bytes / 1000:.1f} KB | {stats.base64_bytes / 1000:.1f} KB | {ratio} |")
    pure = all(len(names) == 1 for key, names in owner.items() if key)
    rows.append(f"\n{len(state.topics)} topics, {requests} compactions, every topic holds one subject: {pure}")
    return "\n".join(rows)


def main() -> None:
    chat = conversation()
    size = sum(len(text.encode()) for _, _, text in chat)
    print(f"Python {platform.python_version()} on {platform.machine()}, {platform.system()}; "
          f"{len(chat)} messages in {len(TOPICS)} topics, {size / 1000:.1f} KB of text "
          f"({size / len(chat):.0f} B/message; the seed's table implies ~820 B/message).\n")
    print("Consecutive messages of one topic, as a compaction would archive them "
          "(JSON = compact UTF-8 JSON of seq, role, content, timestamp):\n")
    print(windows_table(chat))
    print("\nbase64 makes gzip's output 4/3 as long, so the stored ratio is lower than gzip's own.\n")
    print("Controls: what moves the ratio towards the seed's ~86%:\n")
    print(controls_table(chat))
    print()
    print("The topic fold on the whole conversation (each compaction confirmed at once, archives merged):\n")
    print(fold_table(chat))


if __name__ == "__main__":
    main()
