"""Live streaming of turns over websockets (Channels): consumers, routing, group names, delivery."""
