#pragma once
// lazygraph-run's text side: a SentencePiece model (a checkpoint folder's tokenizer.model) when lazygraph was built
// with libsentencepiece (tools/meson.build defines LAZYGRAPH_HAVE_SENTENCEPIECE), and the incremental decoding that
// prints generated tokens as text while they come.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lazygraph_run {

/// A tokenizer that cannot be used: its file is not a SentencePiece model, or this build has no SentencePiece.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A SentencePiece model. Copies share the loaded model.
class Tokenizer {
 public:
  /// The largest model file load() reads: 64 MiB. Real ones are a few MB (Llama 2's 0.5 MB, Gemma's 4 MB);
  /// protobuf would take twice a file's size in memory and abort on one of 2 GiB.
  static constexpr std::size_t max_file_bytes = std::size_t{64} << 20U;

  /// Whether this build can load SentencePiece models at all.
  [[nodiscard]] static bool supported() noexcept;

  /// Loads `model_file`. \throws TokenizerError naming the file and: that it cannot be opened or read (strerror);
  /// is not a regular file (a FIFO would block, a device never end); is larger than max_file_bytes (checked before
  /// reading, and again while reading); SentencePiece's reason for refusing it; or that this build lacks
  /// SentencePiece.
  [[nodiscard]] static Tokenizer load(const std::filesystem::path& model_file);

  /// The ids of `text`, as SentencePiece encodes it (no BOS added). \throws TokenizerError when encoding fails.
  [[nodiscard]] std::vector<int> encode(std::string_view text) const;
  /// The text of `ids`: control tokens (BOS, EOS) decode to nothing, byte pieces to their bytes; an incomplete
  /// UTF-8 sequence at the end decodes to U+FFFD. \throws TokenizerError when decoding fails.
  [[nodiscard]] std::string decode(std::span<const int> ids) const;
  /// Ids the model knows: every id it produces is below this.
  [[nodiscard]] int size() const;
  /// A piece of plain text (not a control, unknown or byte piece, no leading space) that decodes to something,
  /// or nullopt when the model has none.
  [[nodiscard]] std::optional<int> plain_piece() const;

 private:
  struct Model;
  explicit Tokenizer(std::shared_ptr<const Model> model) : model_(std::move(model)) {}
  std::shared_ptr<const Model> model_;
};

/// Turns a sequence of generated tokens into the text to print after each one. Decoding a token alone gets its
/// text wrong: SentencePiece drops the space of the first piece of what it decodes ("▁the" alone is "the"; so is
/// "▁the" after a control token or a piece of spaces at the start), and byte pieces spell a character over several
/// tokens. So the tokens not yet printed are decoded after a fixed piece of plain text (the anchor, whose text is
/// then cut off), once the sequence's text has begun; before that, from the start of the sequence. Text ending in
/// an incomplete character is held back until it completes.
class TextStream {
 public:
  /// Generation continues `prompt`.
  TextStream(Tokenizer tokenizer, std::span<const int> prompt);
  /// The text `token` completes (possibly empty).
  [[nodiscard]] std::string push(int token);
  /// Whatever is still held back (an incomplete character, as U+FFFD), at the end of generation.
  [[nodiscard]] std::string finish();

 private:
  /// The text of the tokens not yet printed, then forgets them; empty, keeping them, while that text ends in an
  /// incomplete character, unless `final`.
  [[nodiscard]] std::string emit(bool final);

  Tokenizer tokenizer_;
  std::optional<int> anchor_;  ///< Tokenizer::plain_piece()
  bool begun_ = false;         ///< whether the sequence's text so far (prompt included) is not empty
  std::vector<int> ids_;       ///< before begun_: the whole sequence; after: the tokens not yet printed
  std::size_t printed_ = 0;    ///< ids_[0, printed_) are printed (or are the prompt)
};

}  // namespace lazygraph_run
