// A SentencePiece tokenizer.model behind nn::Tokenizer, through libsentencepiece when this build has it
// (src/nn/meson.build writes LAZYGRAPH_HAVE_SENTENCEPIECE into sentencepiece_config.hpp).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <system_error>

#include "impl.hpp"
#include "sentencepiece_config.hpp"

#ifndef LAZYGRAPH_HAVE_SENTENCEPIECE
#error "sentencepiece_config.hpp must define LAZYGRAPH_HAVE_SENTENCEPIECE as 0 or 1 (src/nn/meson.build writes it)"
#endif

#if LAZYGRAPH_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace lazygraph::nn::tokenizer {

#if LAZYGRAPH_HAVE_SENTENCEPIECE

namespace {

[[nodiscard]] std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

/// Closes a file descriptor at scope exit.
class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

/// The bytes of `file`, a regular file of at most `max_bytes`, read once (SentencePiece then parses them, so the
/// file cannot change between the checks and the read). \throws TokenizerError naming the file.
std::string read_model_file(const std::filesystem::path& file, std::size_t max_bytes) {
  constexpr std::size_t bytes_per_mib = std::size_t{1} << 20U;
  const auto too_large = [&](const std::string& size) {  // size: "N bytes, " when fstat told it
    return TokenizerError(file, size + "more than the " + std::to_string(max_bytes / bytes_per_mib) +
                                    " MiB a tokenizer.model may have (real ones are a few MB)");
  };
  // Without O_NONBLOCK, opening a FIFO that has no writer would block.
  const Descriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw TokenizerError(file, "cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw TokenizerError(file, "cannot read: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw TokenizerError(file, "not a regular file");
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) throw too_large(std::to_string(st.st_size) + " bytes, ");
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::array<char, 65536> buffer{};
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw TokenizerError(file, "cannot read: " + errno_text(errno));
    if (got == 0) return bytes;
    if (static_cast<std::size_t>(got) > max_bytes - bytes.size()) throw too_large("");
    bytes.append(buffer.data(), static_cast<std::size_t>(got));
  }
}

class SentencePiece final : public Tokenizer::Impl {
 public:
  SentencePiece(const std::filesystem::path& file, const std::string& bytes) : Impl(file) {
    const sentencepiece::util::Status status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      throw TokenizerError(file, "not a SentencePiece model (" + status.ToString() +
                                     "); Llama 3 and other tiktoken models ship a tokenizer.model SentencePiece "
                                     "cannot read, and a tokenizer.json beside it");
    }
  }

  std::vector<int> encode(std::string_view text, EncodeOptions options) const override {
    std::vector<int> ids;
    if (options.add_special_tokens && processor_.bos_id() >= 0) ids.push_back(processor_.bos_id());
    std::vector<int> pieces;
    const sentencepiece::util::Status status = processor_.Encode(text, &pieces);
    if (!status.ok()) throw TokenizerError(file(), "cannot encode the text: " + status.ToString());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    return ids;
  }

  std::string decode(std::span<const int> ids, bool /*skip_special_tokens*/) const override {
    std::vector<int> known;
    known.reserve(ids.size());
    for (const int id : ids) {
      if (id >= 0 && id < processor_.GetPieceSize()) known.push_back(id);
    }
    std::string text;
    const sentencepiece::util::Status status = processor_.Decode(known, &text);
    if (!status.ok()) throw TokenizerError(file(), "cannot decode tokens: " + status.ToString());
    return text;
  }

  int size() const override { return processor_.GetPieceSize(); }

  std::optional<int> id_of(std::string_view token) const override {
    const int id = processor_.PieceToId(token);
    // PieceToId answers the unknown piece's id for any piece it lacks.
    if (id == processor_.unk_id() && processor_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::optional<std::string> token_of(int id) const override {
    if (id < 0 || id >= processor_.GetPieceSize()) return std::nullopt;
    return processor_.IdToPiece(id);
  }

  bool is_special(int id) const override {
    return id >= 0 && id < processor_.GetPieceSize() && processor_.IsControl(id);
  }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

bool have_sentencepiece() noexcept { return true; }

std::shared_ptr<const Tokenizer::Impl> load_sentencepiece(const std::filesystem::path& file, std::size_t max_bytes) {
  return std::make_shared<const SentencePiece>(file, read_model_file(file, max_bytes));
}

#else

bool have_sentencepiece() noexcept { return false; }

std::shared_ptr<const Tokenizer::Impl> load_sentencepiece(const std::filesystem::path& file,
                                                          std::size_t /*max_bytes*/) {
  throw TokenizerError(file, "this lazygraph was built without SentencePiece (libsentencepiece-dev)");
}

#endif

}  // namespace lazygraph::nn::tokenizer
