"""The read-only web console (`praxon console`): server-rendered pages over the platform's public gRPC API.

It is a client like the CLI, not a service: it has no database access and no ServiceSpec; every page is a few gRPC
calls made with the signed-in user's API token, so it shows only that token's tenant and can run wherever a client
can. app.py holds the pages, platform.py the calls, lineage.py the lineage graph (an inline SVG drawn here),
templates/ and static/ the HTML, the stylesheet and the one script (live job progress over server-sent events)."""
