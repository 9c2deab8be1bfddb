"""The keyed queue (design.md "The keyed queue"): ``base`` holds the protocol, ``memory`` the
embedded backend and ``redis`` the scaled one. Import the backend you need; nothing here, so
the embedded mode never imports the Redis client."""
