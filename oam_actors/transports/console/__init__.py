"""The operator's console: a live page at ``/console`` on the server's HTTP port.

:class:`Console` samples what ``model/status`` and ``/metrics`` read (``_feed``) and keeps the
last minutes of traffic (``_history``); ``_pages`` answers the page, sign-in and state requests,
and ``_signin`` decides who may see them. The WebSocket transport serves it
(``websocket_server(…, console=…)``): the page's live stream is the WebSocket ``/console/live``.
The page itself is plain HTML, CSS and a script in ``static/``, package data (no build step).
"""

from ._feed import Console
from ._pages import CONSOLE_PATH, LIVE_PATH, console_response, is_console_path

__all__ = ["CONSOLE_PATH", "LIVE_PATH", "Console", "console_response", "is_console_path"]
