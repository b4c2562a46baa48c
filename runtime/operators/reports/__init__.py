"""Response-time and volume reports: how much buyers wrote and how fast the shop answered, per
hour, day and operator (`periods`: a period and its buckets; `facts`: the summaries kept from
the store's rows; `figures`: a report read from them; `export`: its CSV).

What the figures mean (the console's /reports page, its CSV and `kefu report` say the same):

- Source: one report shows real accounts' conversations or simulated ones, never both (SPEC
  3.13); real by default.
- Period: whole days of the shop's zone (settings.timezone), the first and the last included,
  31 at most; today by default. Hours and days are the zone's (a day the clocks change has 23
  or 25 hours).
- Buyer message: an inbound message whose sender is the buyer (`sender_role` external) and that
  came in live: a history import's (`state` history) are old news, not the period's work.
  Counted in the hour and day it was received (`received_at`).
- Conversation: a customer (one buyer, or one group) with a buyer message in the hour, the day or
  the period; a buyer writing on two days is a conversation of each day and one of the period.
- Wait: the buyer message(s) that came since the shop's last reply, ended by the next reply that
  was sent (an outbox request in state sent; its time is its sent attempt's `finished_at`).
  Its reply time is that time minus the receive time of the wait's first message. Replies that
  were never sent (failed, revoked, of unknown outcome until settled) end nothing; a reply sent
  while nobody waited (a second part, a follow-up) counts for its sender but ends no wait.
  A wait belongs to the hour and day it began, even when it was answered later.
- Automatic and human apart: by the reply that ended the wait (origin auto: the agent; manual:
  an operator, from the console, named, or from the CLI, unnamed).
- First response time: the reply time of each conversation's first wait of a day (of the shop's
  zone): what a buyer who writes in the morning waits for before anything else.
- p50 and p90: nearest rank, the wait at rank ⌈0.5·n⌉ and ⌈0.9·n⌉ of the sorted reply times:
  always a wait a buyer really had. Reply times are counted in whole seconds rounded up: to the
  second up to 2 minutes, to 5 seconds up to 10 minutes, to 30 seconds up to an hour and to 5
  minutes beyond (a 4 min 31 s reply counts as 4 min 35 s).
- Answered within 3 minutes: waits whose reply time is at most 3 minutes, as a share of the waits
  that were answered or have been waiting for over 3 minutes when the report is made; a wait
  younger than that is not judged yet.
- Handoff rate: the period's conversations the agent handed to a human in the period (its
  `im_handoff`; an operator's take-over is not one), divided by the period's conversations.
- Resolved: conversations an operator resolved in the period (their `resolve`), each counted
  once. Handoffs and resolves are kept as they happen (`report_event`, written by the change's
  own transaction), so they move with an account to another shard and go with an erased buyer.
- Per operator: manual messages they sent in the period (each message: a file and its text are
  two), the reply times of the waits begun in the period that their reply ended, and the
  conversations they resolved in it.

Speed: a report reads summaries, never the messages nor the facts per conversation: V24's
triggers keep them from the facts (`report_activity`, a row per conversation and hour;
`reply_wait`, one per wait or reply) in the statement that writes or deletes a fact, so an
erasure or a move leaves them right. Per hour and account the messages and conversations; per
day the conversations counted by their day before with a buyer message, so a period's are those
counted by a day before it (each once, as a count of distinct conversations would, in a sum
over a few rows a day); per day, origin and reply time the answered waits, read as one row of
JSON arrays a day and origin; per operator and reply time the days' waits (a look-up per reply
time an operator ever took) and per day the replies sent; the handoffs and resolves as they
happened (`report_event`, a handoff with its conversation's nearest hours with buyer messages,
so its period's own conversations need no look-up). A report of 31 days of 10^6 messages reads
some 10^4 numbers. The catch-up before it costs what arrived since the last one (see `facts`).
"""
