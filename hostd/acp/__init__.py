"""`hostd acp`: hostd as an Agent Client Protocol agent for editors (see `hostd.acp.agent`)."""
