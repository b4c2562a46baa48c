"""Agent turns: a provider-agnostic loop whose only way out to IM is the im_send_message tool.

`turn` runs one turn over an admitted batch; `session_log` and `sessions` keep a customer's
session, `rotation` and `repair` end and mend it, `view` and `rendering` are what the model
sees, `tools` what it may call, `rules` the keyword provider, `profiles` the named agents routes
choose, `rounds` each turn's status for operators, `script_clock` how times read in a simulation.
"""
