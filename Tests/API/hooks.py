"""What schemathesis may not send to a live recorder: the recorder writes exports where a request's `path` says
(anywhere on the machine the recorder's user may write), and a save told to `wait` for a post-roll answers only
when the post-roll has passed (up to hours later). Both are taken out of every request before it is sent, in every
phase; the rest of each generated request goes as generated."""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if isinstance(body, dict):
        body.pop("path", None)
        if "after" in body:
            body.pop("wait", None)
