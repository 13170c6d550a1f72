"""The process: HTTP server, app and its shared state, answer cache, status page and models watcher."""
