"""How DingTalk's answers are read: HTTP 200 bodies that report failure, and errcode 88's sub_code."""

from __future__ import annotations

from channels.dingtalk.api import classify, undelivered
from channels.errors import Forbidden, RetryAfter


def test_a_deliver_answer_names_each_space_that_failed():
    deliver = {
        "success": True,
        "result": [
            {"spaceType": "IM_GROUP", "spaceId": "cid-a", "success": True},
            {"spaceType": "IM_GROUP", "spaceId": "cid-b", "success": False, "errorMsg": "robot not in group"},
        ],
    }
    assert undelivered(deliver) == ["IM_GROUP cid-b: robot not in group"]
    # createAndDeliver nests the same per-space list under result.deliverResults.
    both = {"success": True, "result": {"outTrackId": "t", "deliverResults": deliver["result"]}}
    assert undelivered(both) == ["IM_GROUP cid-b: robot not in group"]
    assert undelivered({"success": False}) != []
    assert undelivered({"success": True, "result": [deliver["result"][0]]}) == []


def test_errcode_88_is_a_refusal_unless_its_sub_code_is_a_rate_limit():
    refused = classify(200, {"errcode": 88, "sub_code": "60011", "errmsg": "no permission"}, what="x")
    throttled = classify(200, {"errcode": 88, "sub_code": "90018", "errmsg": "too many"}, what="x")
    assert isinstance(refused, Forbidden) and "60011" in str(refused)
    assert isinstance(throttled, RetryAfter)
    assert isinstance(classify(200, {"errcode": 90002, "errmsg": "busy"}, what="x"), RetryAfter)
