// The GGUF tokenizers on hand-built vocabularies: SentencePiece ("llama") merge order, byte fallback,
// round trips and specials; byte-level BPE ("gpt2") merge ranks, the llama3/qwen2/gpt2/default
// pre-tokenizers, round trips and specials; validation; and, when the file is there, llama2.c's
// tok512.bin vocabulary (the stories260K one) against ids computed with llama2.c's encoder.
#include <catch2/catch.hpp>

#include "models.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"

namespace model_tokenizer_tests {

using namespace tokenhost;
using Ids = std::vector<int32_t>;

namespace {

const std::string kSp = "\xE2\x96\x81";  // "▁"

int32_t byte_id(int b) { return 3 + b; }  // SentencePiece test vocab: <0x00>.. start at id 3

// <unk> <s> </s>, the 256 byte tokens, then pieces whose scores make merge order matter.
TokenizerSpec spm_spec() {
  TokenizerSpec s;
  s.model = "llama";
  s.pre = "default";
  auto add = [&](const std::string& text, float score, int32_t type) {
    s.tokens.push_back(text);
    s.scores.push_back(score);
    s.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0, 6);
  add(kSp, -10, 1);             // 259
  add("a", -10, 1);             // 260
  add("b", -10, 1);             // 261
  add("c", -10, 1);             // 262
  add("ab", -1, 1);             // 263
  add("bc", -0.5f, 1);          // 264: merges before "ab"
  add(kSp + "a", -2, 1);        // 265
  add(kSp + "ab", -1.5f, 1);    // 266: reachable only if "ab" merged first
  add("aa", -1, 1);             // 267
  add("h", -10, 1);             // 268
  add("e", -10, 1);             // 269
  add("t", -10, 1);             // 270
  add("th", -3, 1);             // 271
  add("he", -3.5f, 1);          // 272
  add("the", -2.5f, 1);         // 273
  add(kSp + "the", -2.2f, 1);   // 274
  add(kSp + kSp, -4, 1);        // 275
  add("\xE4\xB8\xAD", -5, 1);   // 276: 中
  add("<|eot_id|>", 0, 3);      // 277
  add("<tool>", 0, 4);          // 278: user-defined
  s.bos = 1;
  s.eos = 2;
  s.unk = 0;
  return s;
}

// All 256 bytes (id = byte value, in GPT-2's mapped form), then merges and what they make.
TokenizerSpec bpe_spec(const std::string& pre) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = pre;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(gpt2_byte_encode(std::string(1, char(b))));
  const std::vector<std::string> merges = {"l l", "h e", "e l", "he ll", "hell o", "\xC4\xA0 w", "o r",
                                           "\xC4\xA0w or", "l d", "\xC4\xA0wor ld"};
  for (const std::string& m : merges) {
    s.merges.push_back(m);
    const size_t space = m.find(' ');
    s.tokens.push_back(m.substr(0, space) + m.substr(space + 1));  // 256.. 265
  }
  s.tokens.push_back("\xC4\xA0hi");            // 266: "Ġhi", a token no merge makes
  s.tokens.push_back("<|eot_id|>");            // 267
  s.tokens.push_back("<|begin_of_text|>");     // 268
  s.token_types.assign(s.tokens.size(), 1);
  s.token_types[267] = 3;
  s.token_types[268] = 3;
  s.bos = 268;
  s.eos = 267;
  s.add_bos = true;
  return s;
}

// Random strings from pieces (ASCII, whitespace, 2-, 3- and 4-byte UTF-8).
std::string random_text(std::mt19937& rng, const std::vector<std::string>& alphabet, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len), pick(0, alphabet.size() - 1);
  std::string s;
  for (size_t n = len(rng); n > 0; --n) s += alphabet[pick(rng)];
  return s;
}

const std::vector<std::string> kAlphabet = {"a", "b", "c", "t", "h", "e", "x", "Z", " ", " ", "  ", "\n", "\t",
                                            "\r\n", ".", ",", "!", "'s", "'", "0", "7", "42", "\xC3\xA9",
                                            "\xC3\x9F", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "the", "hello",
                                            " world", "'LL", "\xC2\xA0", "<", ">"};


// llama2.c's tokenizer.bin: int32 max_token_length, then per token float score, int32 length, bytes.
// Its pieces spell spaces as ' '; GGUF spells them "▁", and calls 0..2 <unk> <s> </s>.
TokenizerSpec load_llama2c_tokenizer(const std::string& path, int32_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  int32_t max_len = 0;
  in.read(reinterpret_cast<char*>(&max_len), sizeof max_len);
  TokenizerSpec s;
  s.model = "llama";
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score = 0;
    int32_t len = 0;
    in.read(reinterpret_cast<char*>(&score), sizeof score);
    in.read(reinterpret_cast<char*>(&len), sizeof len);
    std::string text(size_t(len), '\0');
    in.read(text.data(), len);
    int32_t type = 1;
    if (i == 0) {
      text = "<unk>", type = 2;
    } else if (i == 1 || i == 2) {
      text = i == 1 ? "<s>" : "</s>", type = 3;
    } else if (text.size() == 6 && text.rfind("<0x", 0) == 0) {
      type = 6;
    } else {
      std::string escaped;
      for (char c : text) escaped += c == ' ' ? kSp : std::string(1, c);
      text = escaped;
    }
    s.tokens.push_back(text);
    s.scores.push_back(score);
    s.token_types.push_back(type);
  }
  if (!in) throw std::runtime_error("short read: " + path);
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return s;
}

}  // namespace

TEST_CASE("spm: merges the highest-scoring pair first, leftmost on ties", "[tokenizer][spm]") {
  Tokenizer tok(spm_spec());
  CHECK(tok.vocab_size() == 279);
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  // "▁abc": "bc" (-0.5) beats "ab" (-1), then "▁a" (-2); "▁ab" is never formed.
  CHECK(tok.encode("abc", false) == Ids{265, 264});
  CHECK(tok.encode("abc", true) == Ids{1, 265, 264});
  // "▁aaa": the two "aa" pairs tie; the left one merges, leaving "▁" and "a" on either side.
  CHECK(tok.encode("aaa", false) == Ids{259, 267, 260});
  // "▁the": "th" (-3) before "he" (-3.5), then "the", then "▁the".
  CHECK(tok.encode("the", false) == Ids{274});
  CHECK(tok.encode("he", false) == Ids{259, 272});
  CHECK(tok.encode("a b", false) == Ids{265, 259, 261});
  CHECK(tok.encode(" a", false) == Ids{259, 265});  // "▁a" (-2) beats "▁▁" (-4)
  CHECK(tok.encode("", true) == Ids{1});
  CHECK(tok.encode("", false).empty());
}

TEST_CASE("spm: characters outside the vocabulary fall back to byte tokens", "[tokenizer][spm]") {
  Tokenizer tok(spm_spec());
  CHECK(tok.encode("\xC3\xA9", false) == Ids{259, byte_id(0xC3), byte_id(0xA9)});  // é
  CHECK(tok.encode("\xF0\x9F\x98\x80", false) ==
        Ids{259, byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)});  // 😀
  CHECK(tok.encode("\xE4\xB8\xAD", false) == Ids{259, 276});                    // 中 is a token
  CHECK(tok.encode("x", false) == Ids{259, byte_id('x')});
  CHECK(tok.decode({259, byte_id(0xC3), byte_id(0xA9)}) == "\xC3\xA9");

  // Without byte tokens, an unknown character is one unk.
  TokenizerSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>", kSp, "a"};
  s.token_types = {2, 3, 3, 1, 1};
  s.unk = 0;
  s.bos = 1;
  Tokenizer small(s);
  CHECK(small.encode("a\xC3\xA9", true) == Ids{1, 3, 4, 0});
}

TEST_CASE("spm: token_text and decode", "[tokenizer][spm]") {
  Tokenizer tok(spm_spec());
  CHECK(tok.token_text(266) == " ab");
  CHECK(tok.token_text(byte_id('A')) == "A");
  CHECK(tok.token_text(byte_id(0xFF)) == "\xFF");
  CHECK(tok.token_text(1).empty());
  CHECK(tok.token_text(277).empty());
  CHECK(tok.token_text(278) == "<tool>");
  CHECK(tok.is_control(1));
  CHECK(tok.is_control(2));
  CHECK_FALSE(tok.is_control(265));
  CHECK_FALSE(tok.is_control(-1));
  CHECK_FALSE(tok.is_control(100000));
  CHECK(tok.token_type(byte_id(0)) == TokenType::byte);
  CHECK(tok.find_token("ab") == 263);
  CHECK(tok.find_token("zz") == -1);
  // The space prefix the encoder adds is removed once, at the start; control tokens decode to "".
  CHECK(tok.decode({1, 265, 264, 2}) == "abc");
  CHECK(tok.decode({265, 264}) == "abc");
  CHECK(tok.decode({265, 265}) == "a a");
  CHECK(tok.decode({275, 260}) == " a");
  CHECK(tok.decode({}).empty());
  CHECK_THROWS_AS(tok.token_text(279), std::out_of_range);
  CHECK_THROWS_AS(tok.decode({1, -1}), std::out_of_range);
}

TEST_CASE("spm: decode(encode(x)) == x for random text", "[tokenizer][spm]") {
  Tokenizer tok(spm_spec());
  std::mt19937 rng(1234);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_text(rng, kAlphabet, 24);
    INFO("text: '" << text << "'");
    const Ids with_bos = tok.encode(text, true);
    REQUIRE(!with_bos.empty());
    CHECK(with_bos.front() == 1);
    CHECK(tok.decode(with_bos) == text);
    CHECK(tok.decode(tok.encode(text, false)) == text);
  }
}

TEST_CASE("spm: BOS and the space prefix follow the spec's flags", "[tokenizer][spm]") {
  TokenizerSpec s = spm_spec();
  s.add_bos = false;
  CHECK(Tokenizer(s).encode("abc", true) == Ids{265, 264});
  s = spm_spec();
  s.add_space_prefix = false;
  Tokenizer no_prefix(s);
  CHECK(no_prefix.encode("abc", true) == Ids{1, 260, 264});  // "abc": "bc" first, then "a"+"bc" is no token
  CHECK(no_prefix.decode({1, 265, 264}) == " abc");          // nothing to strip
  s = spm_spec();
  s.bos = -1;
  CHECK(Tokenizer(s).encode("abc", true) == Ids{265, 264});  // no bos: none added
}

TEST_CASE("spm: special tokens in the text", "[tokenizer][spm][special]") {
  Tokenizer tok(spm_spec());
  // parse_special: control tokens match; the space prefix returns after each special token.
  CHECK(tok.encode("x<|eot_id|>abc", false, true) == Ids{259, byte_id('x'), 277, 265, 264});
  CHECK(tok.encode("<s>abc", false, true) == Ids{1, 265, 264});
  const Ids plain = tok.encode("x<|eot_id|>abc", false);
  CHECK(std::find(plain.begin(), plain.end(), 277) == plain.end());
  CHECK(tok.decode(plain) == "x<|eot_id|>abc");
  // The member flag.
  Tokenizer chat(spm_spec());
  chat.parse_special = true;
  CHECK(chat.encode("<|eot_id|>", true) == Ids{1, 277});
  // User-defined tokens match either way (llama.cpp).
  CHECK(tok.encode("<tool>a", false) == Ids{278, 265});
}

TEST_CASE("bpe: merges by rank", "[tokenizer][bpe]") {
  Tokenizer tok(bpe_spec("llama3"));
  CHECK(tok.vocab_size() == 269);
  // "hello": "l l" (rank 0), "h e" (1), "he ll" (3), "hell o" (4); "e l" (2) loses to "h e".
  CHECK(tok.encode("hello", false) == Ids{260});
  CHECK(tok.encode("hel", false) == Ids{257, 'l'});
  CHECK(tok.encode(" world", false) == Ids{265});
  CHECK(tok.encode("hello world", false) == Ids{260, 265});
  CHECK(tok.encode("hello world", true) == Ids{268, 260, 265});
  CHECK(tok.encode("hello, world!", false) == Ids{260, ',', 265, '!'});
  CHECK(tok.encode("", true) == Ids{268});

  // Swapping the ranks of "h e" and "e l" changes the result.
  TokenizerSpec s = bpe_spec("llama3");
  std::swap(s.merges[1], s.merges[2]);
  std::swap(s.tokens[257], s.tokens[258]);
  Tokenizer swapped(s);
  CHECK(swapped.encode("hel", false) == Ids{'h', 257});

  // add_bos false in the spec: no BOS whatever the caller asks.
  s = bpe_spec("llama3");
  s.add_bos = false;
  CHECK(Tokenizer(s).encode("hello", true) == Ids{260});
}

TEST_CASE("bpe: llama3 takes a word that is a token whole (ignore_merges)", "[tokenizer][bpe]") {
  CHECK(Tokenizer(bpe_spec("llama3")).encode(" hi", false) == Ids{266});
  CHECK(Tokenizer(bpe_spec("gpt2")).encode(" hi", false) == Ids{' ', 'h', 'i'});  // no merge makes "Ġhi"
}

TEST_CASE("bpe: token_text undoes the byte-level mapping", "[tokenizer][bpe]") {
  Tokenizer tok(bpe_spec("llama3"));
  CHECK(tok.token_text(' ') == " ");
  CHECK(tok.token_text('\n') == "\n");
  CHECK(tok.token_text(0xC3) == "\xC3");
  CHECK(tok.token_text(265) == " world");
  CHECK(tok.token_text(267).empty());
  CHECK(tok.decode({268, 260, 265, 267}) == "hello world");
  CHECK(tok.decode({' ', 'a'}) == " a");  // no space prefix to strip for gpt2
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, char(b));
    CHECK(gpt2_byte_decode(gpt2_byte_encode(byte)) == byte);
  }
  CHECK(gpt2_byte_encode(" ") == "\xC4\xA0");   // Ġ
  CHECK(gpt2_byte_encode("\n") == "\xC4\x8A");  // Ċ
  CHECK(gpt2_byte_encode("A") == "A");
}

TEST_CASE("bpe: pre-tokenizers split the way llama.cpp's do", "[tokenizer][bpe][pretokenize]") {
  using W = std::vector<std::string>;
  const std::string text = "Hello world's 123 test!!";
  CHECK(pretokenize(PreTokenizer::llama3, text) == W{"Hello", " world", "'s", " ", "123", " test", "!!"});
  CHECK(pretokenize(PreTokenizer::qwen2, text) == W{"Hello", " world", "'s", " ", "1", "2", "3", " test", "!!"});
  CHECK(pretokenize(PreTokenizer::gpt2, text) == W{"Hello", " world", "'s", " 123", " test", "!!"});
  CHECK(pretokenize(PreTokenizer::default_bpe, "Hello, world's 1234") ==
        W{"Hello", ",", " world", "'", "s", " ", "123", "4"});

  CHECK(pretokenize(PreTokenizer::llama3, "12345") == W{"123", "45"});
  CHECK(pretokenize(PreTokenizer::llama3, "I'M here") == W{"I", "'M", " here"});  // case-insensitive
  CHECK(pretokenize(PreTokenizer::gpt2, "I'M here") == W{"I", "'", "M", " here"});
  CHECK(pretokenize(PreTokenizer::llama3, "  hi\n\nthere") == W{" ", " hi", "\n\n", "there"});
  CHECK(pretokenize(PreTokenizer::llama3, "a  ") == W{"a", "  "});
  CHECK(pretokenize(PreTokenizer::llama3, "x = (y);\n") == W{"x", " =", " (", "y", ");\n"});
  CHECK(pretokenize(PreTokenizer::llama3, "\"quoted\"") == W{"\"quoted", "\""});
  CHECK(pretokenize(PreTokenizer::llama3, "h\xC3\xA9llo w\xC3\xB6rld") == W{"h\xC3\xA9llo", " w\xC3\xB6rld"});
  CHECK(pretokenize(PreTokenizer::llama3, "hi\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok") ==
        W{"hi", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok"});
  CHECK(pretokenize(PreTokenizer::llama3, "").empty());

  CHECK(pre_tokenizer_from_name("llama-bpe") == PreTokenizer::llama3);
  CHECK(pre_tokenizer_from_name("qwen2") == PreTokenizer::qwen2);
  CHECK(pre_tokenizer_from_name("") == PreTokenizer::default_bpe);
  CHECK_THROWS_WITH(pre_tokenizer_from_name("llama4"), Catch::Contains("llama4"));

  // The pre-tokenizers of several passes (each splits the pieces the one before made).
  CHECK(pretokenize(PreTokenizer::starcoder, "abc 123 x") == W{"abc", " ", "1", "2", "3", " x"});
  CHECK(pretokenize(PreTokenizer::falcon, "Hi, (x)=1234") == W{"Hi", ",", " ", "(", "x", ")=", "123", "4"});
  CHECK(pretokenize(PreTokenizer::deepseek_coder, "a1 b\n") == W{"a", "1", " b", "\n"});
  CHECK(pretokenize(PreTokenizer::deepseek_llm, "Hello \xE4\xB8\x96\xE7\x95\x8C  12") ==
        W{"Hello", " ", "\xE4\xB8\x96\xE7\x95\x8C", "  ", "12"});  // 世界: the CJK pass
  CHECK(pretokenize(PreTokenizer::deepseek_llm, "a!! ") == W{"a", "!!", " "});
  // Categories beyond ASCII come from Unicode: Cyrillic letters, an Arabic-Indic digit, an em dash.
  CHECK(pretokenize(PreTokenizer::gpt2, "\xD0\xBD\xD0\xB5 \xD9\xA3\xE2\x80\x94") ==
        W{"\xD0\xBD\xD0\xB5", " \xD9\xA3", "\xE2\x80\x94"});
  CHECK(pre_tokenizer_from_name("gpt-2") == PreTokenizer::gpt2);
  CHECK(pre_tokenizer_from_name("refact") == PreTokenizer::starcoder);
  CHECK_THROWS_WITH(pre_tokenizer_from_name("deepseek-lm"), Catch::Contains("deepseek-llm"));

  std::mt19937 rng(7);
  for (PreTokenizer kind :
       {PreTokenizer::llama3, PreTokenizer::qwen2, PreTokenizer::gpt2, PreTokenizer::default_bpe, PreTokenizer::falcon,
        PreTokenizer::starcoder, PreTokenizer::deepseek_llm, PreTokenizer::deepseek_coder}) {
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_text(rng, kAlphabet, 20);
      std::string joined;
      for (const std::string& w : pretokenize(kind, s)) {
        CHECK(!w.empty());
        joined += w;
      }
      CHECK(joined == s);
    }
  }
}

TEST_CASE("bpe: decode(encode(x)) == x for random text and bytes", "[tokenizer][bpe]") {
  std::mt19937 rng(99);
  for (const char* pre : {"llama3", "qwen2", "gpt2", "default"}) {
    Tokenizer tok(bpe_spec(pre));
    for (int i = 0; i < 500; ++i) {
      const std::string text = random_text(rng, kAlphabet, 24);
      INFO(pre << " text: '" << text << "'");
      CHECK(tok.decode(tok.encode(text, true)) == text);
    }
    std::uniform_int_distribution<int> byte(0, 255), len(0, 16);
    for (int i = 0; i < 300; ++i) {
      std::string bytes;
      for (int n = len(rng); n > 0; --n) bytes += char(byte(rng));
      CHECK(tok.decode(tok.encode(bytes, false)) == bytes);  // invalid UTF-8 included
    }
  }
}

TEST_CASE("bpe: special tokens with parse_special", "[tokenizer][bpe][special]") {
  Tokenizer tok(bpe_spec("llama3"));
  const std::string text = "<|begin_of_text|>hello<|eot_id|>";
  CHECK(tok.encode(text, false, true) == Ids{268, 260, 267});
  CHECK(tok.encode(text, true, true) == Ids{268, 268, 260, 267});
  const Ids plain = tok.encode(text, false);
  CHECK(std::find(plain.begin(), plain.end(), 267) == plain.end());
  CHECK(std::find(plain.begin(), plain.end(), 268) == plain.end());
  CHECK(tok.decode(plain) == text);
  tok.parse_special = true;
  CHECK(tok.encode("hello<|eot_id|>", false) == Ids{260, 267});
}

TEST_CASE("wpm: WordPiece lower-cases, strips accents, splits punctuation and CJK, and matches longest first",
          "[tokenizer][wpm]") {
  TokenizerSpec s;
  s.model = "bert";
  const std::string w = "\xE2\x96\x81";  // ▁ marks a word's start
  for (const std::string& t : {std::string("[UNK]"), std::string("[CLS]"), w + "hello", w + "h", std::string("ello"),
                               w + ",", w + "cafe", w + "\xE4\xB8\x96", w + "a", std::string("b")}) {
    s.tokens.push_back(t);
    s.token_types.push_back(int32_t(TokenType::normal));
  }
  s.token_types[0] = int32_t(TokenType::unknown);
  s.token_types[1] = int32_t(TokenType::control);
  s.unk = 0;
  const Tokenizer tok(s);
  // "Héllo, CAFÉ 世x": é and É lose their accents; the comma and 世 are words of their own; "x" and
  // "zz" cannot be covered and become [UNK]; "helloello" is ▁hello + ello; "ab" is ▁a + b.
  CHECK(tok.encode("H\xC3\xA9llo, CAF\xC3\x89 \xE4\xB8\x96x helloello ab zz", false) ==
        std::vector<int32_t>{2, 5, 6, 7, 0, 2, 4, 8, 9, 0});
  CHECK(tok.decode({2, 5, 6}) == "hello , cafe");  // the first word's ▁ is not a space
  CHECK(tok.encode("", false).empty());
  CHECK(tok.encode(" \t\n", false).empty());

  s.lowercase = false;
  s.strip_accents = false;
  CHECK(Tokenizer(s).encode("Hello h\xC3\xA9", false) == std::vector<int32_t>{0, 0});
}

TEST_CASE("tokenizer: the spec is validated", "[tokenizer][validation]") {
  TokenizerSpec s = spm_spec();
  s.model = "t5";
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("unknown tokenizer model 't5'"));
  CHECK_THROWS_AS(Tokenizer(s), std::invalid_argument);
  s = spm_spec();
  s.scores.pop_back();
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("scores"));
  s = spm_spec();
  s.token_types.push_back(1);
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("token types"));
  s = spm_spec();
  s.bos = 279;
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("bos token id 279"));
  s = spm_spec();
  s.eos = -7;
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("eos"));
  s = spm_spec();
  s.token_types[5] = 9;
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("type 9"));
  s = spm_spec();
  s.tokens[5] = "<0xZZ>";
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("<0xZZ>"));
  s = spm_spec();
  s.tokens.clear();
  s.scores.clear();
  s.token_types.clear();
  CHECK_THROWS_WITH(Tokenizer(s), Catch::Contains("no tokens"));

  TokenizerSpec b = bpe_spec("llama3");
  b.merges.push_back("he zz");
  CHECK_THROWS_WITH(Tokenizer(b), Catch::Contains("unknown token 'zz'"));
  b = bpe_spec("llama3");
  b.merges.push_back("hello");
  CHECK_THROWS_WITH(Tokenizer(b), Catch::Contains("merge 10 'hello'"));
  b = bpe_spec("llama3");
  b.merges.push_back("h h");
  CHECK_THROWS_WITH(Tokenizer(b), Catch::Contains("'hh', which is not a token"));
  b = bpe_spec("tekken9");
  CHECK_THROWS_WITH(Tokenizer(b), Catch::Contains("tekken9"));
  b = bpe_spec("llama3");
  b.scores.clear();  // gpt2 vocabularies may come without scores
  CHECK_NOTHROW(Tokenizer(b));
}

TEST_CASE("spm: tok512.bin (stories260K) encodes as llama2.c does", "[tokenizer][spm][stories260k]") {
  const std::string path = tokenhost::testing::require_model_file("tok512.bin");
  Tokenizer tok(load_llama2c_tokenizer(path, 512));
  // Expected ids from llama2.c's encode (run.c: BOS, a dummy " " prefix, greedy best-score merges).
  CHECK(tok.encode("Once upon a time", true) == Ids{1, 403, 407, 261, 378});
  CHECK(tok.encode("Hello world", true) == Ids{1, 346, 306, 414, 263, 304, 341});
  CHECK(tok.encode("The cat sat on the mat.", true) == Ids{1, 291, 280, 294, 262, 294, 353, 265, 284, 294, 426});
  CHECK(tok.encode("\xC3\xA9\xF0\x9F\x98\x80x", true) == Ids{1, 410, 485, 243, 162, 155, 131, 444});
  CHECK(tok.decode(tok.encode("Once upon a time", true)) == "Once upon a time");
  CHECK(tok.token_text(403) == " Once");
}

}  // namespace model_tokenizer_tests
