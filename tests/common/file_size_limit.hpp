#pragma once
// A full disk for the save tests: a forked child whose files cannot grow past a size (RLIMIT_FSIZE), so that a write
// past it fails with EFBIG ("File too large") as a write to a full disk fails with ENOSPC, at any file the save writes.

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <exception>
#include <functional>
#include <string>

namespace lgtest {

/// Runs `action` in a forked child in which no file can be written past `max_bytes` (SIGXFSZ ignored, so the write
/// fails instead of killing it), and returns "no error" or "threw: " and the message of what it threw. The child
/// shares nothing with this process after the fork: it only writes files, and its outcome comes back through a pipe.
inline std::string with_file_size_limit(rlim_t max_bytes, const std::function<void()>& action) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string outcome = "no error";
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{max_bytes, max_bytes};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
      outcome = "setrlimit failed";
    } else {
      try {
        action();
      } catch (const std::exception& e) {
        outcome = std::string("threw: ") + e.what();
      }
    }
    const char* at = outcome.data();
    std::size_t left = outcome.size();
    while (left > 0) {
      const ssize_t written = ::write(pipe_fds[1], at, left);
      if (written <= 0) break;
      at += written;
      left -= static_cast<std::size_t>(written);
    }
    ::_exit(0);  // no destructors, no doctest report: those are the parent's
  }
  ::close(pipe_fds[1]);
  std::string outcome;
  char buffer[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (got < 0) break;
    outcome.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  return outcome;
}

}  // namespace lgtest
