"""A word-level tokenizer for the tiny test checkpoints (test-only support): token i is the word "t<i>", so a text
prompt names its ids ("t10 t11 t12" is [10, 11, 12]), and a chat template that a real SGLang server applies to
/v1/chat/completions requests. With it a server runs without --skip-tokenizer-init: chat completions, completions
and /generate with text all work on the CPU."""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def word(token_id: int) -> str:
    return f"t{token_id}"


def text_of(ids) -> str:
    return " ".join(word(i) for i in ids)


def write_word_tokenizer(path, vocab_size: int, chat_template: str) -> None:
    """tokenizer.json and tokenizer_config.json into the checkpoint directory `path`."""
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({word(i): i for i in range(vocab_size)}, unk_token=word(0)))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token=word(0), chat_template=chat_template)
    tokenizer.save_pretrained(str(path))
