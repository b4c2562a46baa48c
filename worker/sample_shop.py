"""The simulator's sample shop, which `kefu demo` and `kefu simulate` talk to when told no other:
named apart from the simulation so that `kefu --help` can show it without loading one."""

SAMPLE_SHOP = "sim-shop"
SAMPLE_ROUTE = f"{SAMPLE_SHOP}-direct"  # its direct route
