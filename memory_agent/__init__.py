"""Memory Agent: event-sourced conversation memory."""
