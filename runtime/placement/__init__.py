"""Where an account lives (SPEC 3.12): shards and their holders, slices, moves, the directory and operation receipts."""
