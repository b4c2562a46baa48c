"""Agent turns: a provider-agnostic loop whose only way out to IM is the im_send_message tool."""
