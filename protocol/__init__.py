"""Pure codecs for the pinned Kafka protocol subset. Never imports trio, socket or time."""
