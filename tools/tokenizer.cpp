#include "tokenizer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <system_error>

#ifndef LAZYGRAPH_HAVE_SENTENCEPIECE
#error "build with -DLAZYGRAPH_HAVE_SENTENCEPIECE=0 or 1 (tools/meson.build passes whether SentencePiece was found)"
#endif

#if LAZYGRAPH_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace lazygraph_run {

namespace {

/// U+FFFD in UTF-8: what SentencePiece decodes an incomplete or invalid byte sequence to.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

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

/// The bytes of `file`, a regular file of at most Tokenizer::max_file_bytes, read once (SentencePiece then parses
/// them, so the file cannot change between the checks and the read). \throws TokenizerError naming the file.
std::string read_model_file(const std::filesystem::path& file) {
  constexpr std::size_t bytes_per_mib = std::size_t{1} << 20U;
  const auto too_large = [&](const std::string& size) {  // size: "N bytes, " when fstat told it
    return TokenizerError(file.string() + ": " + size + "more than the " +
                          std::to_string(Tokenizer::max_file_bytes / bytes_per_mib) +
                          " MiB a tokenizer.model may have (real ones are a few MB)");
  };
  // Without O_NONBLOCK, opening a FIFO that has no writer would block.
  const Descriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw TokenizerError(file.string() + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw TokenizerError(file.string() + ": cannot read: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw TokenizerError(file.string() + ": not a regular file");
  if (static_cast<std::uintmax_t>(st.st_size) > Tokenizer::max_file_bytes) {
    throw too_large(std::to_string(st.st_size) + " bytes, ");
  }
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::array<char, 65536> buffer{};
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw TokenizerError(file.string() + ": cannot read: " + errno_text(errno));
    if (got == 0) return bytes;
    if (static_cast<std::size_t>(got) > Tokenizer::max_file_bytes - bytes.size()) throw too_large("");
    bytes.append(buffer.data(), static_cast<std::size_t>(got));
  }
}

}  // namespace

struct Tokenizer::Model {
  sentencepiece::SentencePieceProcessor processor;
};

bool Tokenizer::supported() noexcept { return true; }

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  const std::string bytes = read_model_file(model_file);
  auto model = std::make_shared<Model>();
  const sentencepiece::util::Status status = model->processor.LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw TokenizerError(model_file.string() + ": not a SentencePiece model (" + status.ToString() +
                         "); Llama 3 and other tiktoken models ship a tokenizer.model SentencePiece cannot read");
  }
  return Tokenizer(std::move(model));
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = model_->processor.Encode(text, &ids);
  if (!status.ok()) throw TokenizerError("cannot tokenize the prompt: " + status.ToString());
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string text;
  const sentencepiece::util::Status status = model_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw TokenizerError("cannot decode tokens: " + status.ToString());
  return text;
}

int Tokenizer::size() const { return model_->processor.GetPieceSize(); }

std::optional<int> Tokenizer::plain_piece() const {
  const sentencepiece::SentencePieceProcessor& p = model_->processor;
  for (int id = 0; id < p.GetPieceSize(); ++id) {
    if (p.IsControl(id) || p.IsUnknown(id) || p.IsByte(id) || p.IsUnused(id)) continue;
    if (p.IdToPiece(id).starts_with("\xE2\x96\x81")) continue;  // U+2581, SentencePiece's space
    const std::string text = decode(std::vector<int>{id});
    if (!text.empty() && static_cast<unsigned char>(text.front()) > ' ') return id;
  }
  return std::nullopt;
}

#else

struct Tokenizer::Model {};

bool Tokenizer::supported() noexcept { return false; }

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  throw TokenizerError(model_file.string() + ": this lazygraph-run was built without SentencePiece");
}

std::vector<int> Tokenizer::encode(std::string_view /*text*/) const { return {}; }

std::string Tokenizer::decode(std::span<const int> /*ids*/) const { return {}; }

int Tokenizer::size() const { return 0; }

std::optional<int> Tokenizer::plain_piece() const { return std::nullopt; }

#endif

TextStream::TextStream(Tokenizer tokenizer, std::span<const int> prompt)
    : tokenizer_(std::move(tokenizer)), anchor_(tokenizer_.plain_piece()) {
  begun_ = anchor_.has_value() && !tokenizer_.decode(prompt).empty();
  if (!begun_) ids_.assign(prompt.begin(), prompt.end());
  printed_ = ids_.size();
}

std::string TextStream::push(int token) {
  // An id past the tokenizer's pieces (a model's vocabulary padded beyond its tokenizer) has no text.
  if (token >= 0 && token < tokenizer_.size()) ids_.push_back(token);
  return emit(false);
}

std::string TextStream::finish() { return emit(true); }

std::string TextStream::emit(bool final) {
  if (printed_ == ids_.size()) return {};
  std::string before;
  std::string now;
  if (begun_) {
    std::vector<int> window{*anchor_};
    before = tokenizer_.decode(window);
    window.insert(window.end(), ids_.begin(), ids_.end());
    now = tokenizer_.decode(window);
  } else {
    before = tokenizer_.decode(std::span<const int>(ids_).first(printed_));
    now = tokenizer_.decode(ids_);
  }
  if (!final && now.ends_with(kReplacement)) return {};  // a character still incomplete: wait for its other bytes
  // `before` is a prefix of `now`; should decoding ever change earlier text, print from where they part.
  std::size_t common = 0;
  while (common < before.size() && common < now.size() && before[common] == now[common]) ++common;
  std::string text = now.substr(common);
  if (begun_) {
    ids_.clear();
  } else if (!now.empty() && anchor_.has_value()) {
    begun_ = true;
    ids_.clear();
  }
  printed_ = ids_.size();
  return text;
}

}  // namespace lazygraph_run
