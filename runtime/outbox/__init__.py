"""What the shop sends (SPEC 3.8, 3.9): requests and their one attempt, recipients, files,
manual sends, and whether the buyer read them."""
