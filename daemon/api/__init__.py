"""The JSON API (/api/v1) and the access control the console shares with it."""
