"""Named agents at run time: which one answers a message and why, and the room window (docs/agents.md)."""
