"""Tests of the token layout, problem generation and problem files (mathrl.engine.tasks)."""

import pytest
import torch

from mathrl.engine.tasks import (
    END,
    EQUALS,
    OPS,
    VOCAB,
    VOCAB_SIZE,
    ProblemFileError,
    Task,
    decode,
    encode,
    filter_by_ndigit,
    make_problem_sets,
    problem_splits,
    read_problems,
    write_problems,
)

ADD3, MUL2 = Task("add", 3), Task("mul", 2)


def t(*xs):
    return torch.tensor(xs, dtype=torch.long)


def test_vocabulary_and_round_trip():
    assert VOCAB_SIZE == 14 and END == 13 and EQUALS == 12
    assert encode("09+*=$") == [0, 9, 10, 11, 12, 13]
    assert decode(encode("007+045=2500$")) == "007+045=2500$"
    with pytest.raises(KeyError, match="'x'"):
        encode("1x")
    assert decode(torch.arange(VOCAB_SIZE)) == VOCAB


def test_task_shapes_and_validation():
    assert (ADD3.prompt_len, ADD3.answer_width, ADD3.answer_len, ADD3.seq_len) == (8, 4, 5, 13)
    assert (MUL2.prompt_len, MUL2.answer_width, MUL2.answer_len, MUL2.seq_len) == (6, 4, 5, 11)
    assert ADD3.max_operand == 999
    with pytest.raises(ValueError, match="'add', 'mul'"):
        Task("sub", 3)
    with pytest.raises(ValueError, match="ndigit"):
        Task("add", 0)


def test_add_layout_by_hand():
    assert ADD3.prompt_text(7, 45) == "007+045="
    assert ADD3.answer_text(7, 45) == "2500$"  # 52 -> 0052 -> reversed
    assert decode(ADD3.encode_prompts(t(7), t(45))[0]) == "007+045="
    assert decode(ADD3.encode_answers(t(7), t(45))[0]) == "2500$"
    assert ADD3.answer_text(999, 999) == "8991$"  # the carry reaches the extra digit


def test_mul_layout_by_hand():
    assert MUL2.prompt_text(12, 34) == "12*34="
    assert MUL2.answer_text(12, 34) == "8040$"  # 408 -> 0408 -> reversed
    assert decode(MUL2.encode_answers(t(12), t(34))[0]) == "8040$"
    assert MUL2.answer_text(99, 99) == "1089$"  # 9801 uses all four digits


def test_reverse_false_writes_most_significant_first():
    fwd = Task("add", 3, reverse=False)
    assert fwd.answer_text(7, 45) == "0052$"
    tokens = fwd.encode_answers(t(7), t(45))
    assert decode(tokens[0]) == "0052$"
    assert fwd.decode_answers(tokens).tolist() == [52]
    assert ADD3.decode_answers(tokens).tolist() == [2500]  # read in the other order


def test_decode_answers_values_and_malformed():
    rows = torch.tensor([encode(r) for r in ["2500$", "8991$", "25+0$", "25000", "$2500"]])
    assert ADD3.decode_answers(rows).tolist() == [52, 1998, -1, -1, -1]


def test_vectorised_encoding_matches_text():
    gen = torch.Generator().manual_seed(0)
    for task in (ADD3, MUL2, Task("mul", 3, reverse=False)):
        a, b = task.sample_operands(200, gen)
        prompts, answers = task.encode_prompts(a, b), task.encode_answers(a, b)
        assert prompts.shape == (200, task.prompt_len)
        assert answers.shape == (200, task.answer_len)
        for x, y, p, ans in zip(a.tolist(), b.tolist(), prompts, answers):
            assert decode(p) == task.prompt_text(x, y)
            assert decode(ans) == task.answer_text(x, y)
        assert task.decode_answers(answers).tolist() == OPS[task.op].fn(a, b).tolist()


def test_operands_out_of_range_rejected():
    with pytest.raises(ValueError, match="0..999"):
        ADD3.encode_prompts(t(1000), t(1))


def test_sample_operands_curriculum_range():
    a, b = ADD3.sample_operands(1000, torch.Generator().manual_seed(1), ndigit=1)
    assert int(torch.cat([a, b]).max()) <= 9
    assert ADD3.encode_prompts(a, b).shape == (1000, 8)  # the width stays the full task's
    with pytest.raises(ValueError):
        ADD3.sample_operands(4, torch.Generator(), ndigit=4)


def _keys(pairs):
    return set(map(tuple, pairs.tolist()))


def test_problem_sets_deterministic_disjoint_distinct():
    train, test = make_problem_sets(ADD3, 5000, 500, seed=3)
    assert train.shape == (5000, 2) and test.shape == (500, 2)
    assert len(_keys(train)) == 5000 and len(_keys(test)) == 500
    assert not _keys(train) & _keys(test)
    again = make_problem_sets(ADD3, 5000, 500, seed=3)
    assert torch.equal(train, again[0]) and torch.equal(test, again[1])
    assert not torch.equal(test, make_problem_sets(ADD3, 5000, 500, seed=4)[1])
    assert int(train.max()) <= 999 and int(train.min()) >= 0


def test_problem_sets_all_the_rest_and_too_many():
    train, test = make_problem_sets(MUL2, 0, 1000, seed=0)
    assert len(test) == 1000 and len(train) == 9000
    assert len(_keys(train) | _keys(test)) == 10_000
    with pytest.raises(ValueError, match="10000 distinct.*9500.*501"):
        make_problem_sets(MUL2, 9500, 501, seed=0)


@pytest.mark.parametrize("task, n_train", [(ADD3, 5000), (MUL2, 0), (Task("add", 5), 3000)])
def test_validation_split_is_disjoint_and_leaves_the_test_set_unchanged(task, n_train):
    splits = problem_splits(task, n_train, 500, seed=3, n_val=700)
    assert len(splits["val"]) == 700 and len(_keys(splits["val"])) == 700
    assert not _keys(splits["val"]) & _keys(splits["test"]) and not _keys(splits["val"]) & _keys(splits["train"])
    assert torch.equal(
        splits["test"], make_problem_sets(task, n_train, 500, seed=3)[1]
    )  # adding val moves no test problem
    if n_train:
        assert len(splits["train"]) == n_train
    else:
        assert len(splits["train"]) + 700 + 500 == 10_000
    with pytest.raises(ValueError, match="n_val=9000"):
        problem_splits(MUL2, 0, 1001, seed=0, n_val=9000)


def test_problem_sets_by_rejection_for_large_spaces():
    task = Task("add", 5)  # 10**10 pairs: too many for randperm
    train, test = make_problem_sets(task, 3000, 300, seed=5)
    assert len(_keys(train)) == 3000 and len(_keys(test)) == 300
    assert not _keys(train) & _keys(test)
    assert torch.equal(test, make_problem_sets(task, 3000, 300, seed=5)[1])


def test_write_read_round_trip(tmp_path):
    path = tmp_path / "sub" / "train.txt"
    pairs = torch.tensor([[7, 45], [999, 999], [0, 0]])
    write_problems(path, ADD3, pairs)
    assert path.read_text() == "007+045=52\n999+999=1998\n000+000=0\n"
    assert torch.equal(read_problems(path, ADD3), pairs)
    assert [p.name for p in path.parent.iterdir()] == ["train.txt"]  # no temp file left behind
    write_problems(path, MUL2, torch.tensor([[12, 34]]))
    assert path.read_text() == "12*34=408\n"


@pytest.mark.parametrize(
    "bad, why",
    [
        ("007+045=53", "expected 52"),
        ("007*045=315", "operator"),
        ("07+045=52", "3-digit"),
        ("007+045=52 junk", "expected"),
        ("", "expected"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, bad, why):
    path = tmp_path / "p.txt"
    path.write_text(f"001+002=3\n{bad}\n004+005=9\n")
    with pytest.raises(ProblemFileError, match=why) as err:
        read_problems(path, ADD3)
    message = str(err.value)
    assert "line 2" in message and str(path) in message and repr(bad) in message


def test_empty_problem_file_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(ProblemFileError, match="empty"):
        read_problems(path, ADD3)


def test_filter_by_ndigit():
    pairs = torch.tensor([[7, 45], [9, 9], [100, 3], [0, 10], [5, 0]])
    assert filter_by_ndigit(pairs, 1).tolist() == [[9, 9], [5, 0]]
    assert filter_by_ndigit(pairs, 2).tolist() == [[7, 45], [9, 9], [0, 10], [5, 0]]
