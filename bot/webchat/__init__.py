"""The web chat's HTTP side: ``/chat`` (a static page) over ``/api/chat/...`` (JSON and a live stream).

The channel itself is :class:`channels.web.channel.WebChannel`; this package only signs people in (with
the connect page's own dependency, :func:`connections.api.get_current_user`) and hands their requests to
it. The page knows nothing but this API.
"""
