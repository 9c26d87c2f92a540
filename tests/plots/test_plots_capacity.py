"""The deployment figure (`sim.plots.capacity`): one bar per deployment of a `capacity_table`, labelled with
its figure and the requests that fit; bad input refused by name."""

import pandas as pd
import pytest
from matplotlib.figure import Figure

from sim.plots import plot_capacity

TABLE = pd.DataFrame({"kv_capacity_tokens_total": [708_857, 3_906_320, 5_670_861],
                      "max_concurrent_requests_total": [4, 16, 34], "prompt_len": [163_840] * 3,
                      "output_len": [0] * 3}, index=pd.Index(["TP=8", "DP=8 + EP", "TP=8, DCP=8"], name="deployment"))


def test_one_bar_per_deployment_in_the_tables_order_with_its_labels():
    fig = plot_capacity(TABLE)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == [708_857, 3_906_320, 5_670_861]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["TP=8", "DP=8 + EP", "TP=8, DCP=8"]
    assert ax.yaxis_inverted()  # the first deployment on top
    texts = [t.get_text() for t in ax.texts]
    assert texts == [" 708,857  (4 requests)", " 3,906,320  (16 requests)", " 5,670,861  (34 requests)"]
    assert ax.get_title() == "Requests of 163,840 prompt + 0 output tokens in brackets"
    assert ax.get_xlabel() == "KV token slots, all GPUs of the deployment"


def test_another_column_and_no_request_counts():
    table = TABLE.drop(columns="max_concurrent_requests_total").assign(kv_capacity_tokens_per_gpu=[1, 2, 3])
    ax = plot_capacity(table, "kv_capacity_tokens_per_gpu", title="per GPU").axes[0]
    assert [t.get_text() for t in ax.texts] == [" 1", " 2", " 3"]
    assert ax.get_title() == "per GPU" and ax.get_xlabel() == "KV token slots per GPU"


def test_lengths_that_differ_leave_the_title_out():
    table = TABLE.assign(prompt_len=[1, 2, 3])
    assert plot_capacity(table).axes[0].get_title() == ""


@pytest.mark.parametrize(("value", "column", "message"), [
    ({"TP=8": 1}, "kv_capacity_tokens_total", "`table` must be a DataFrame"),
    (TABLE, "kv_capacity_tokenz", "kv_capacity_tokenz"),
    (TABLE.iloc[:0], "kv_capacity_tokens_total", "deployments has no rows to plot"),
])
def test_bad_input_is_refused_by_name(value, column, message):
    with pytest.raises(ValueError, match=message):
        plot_capacity(value, column)
