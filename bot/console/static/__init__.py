"""The console page's HTML, script and stylesheet (package data; no build step)."""
