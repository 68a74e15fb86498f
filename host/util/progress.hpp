// Progress of a long command on stderr: on a terminal one line rewritten in place ("\r"), elsewhere (a
// log file, a pipe) a line of its own at each quarter, so that logs hold no carriage returns.
#pragma once

#include <cstdio>
#include <string>

#include <unistd.h>

namespace tokenhost {

class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), terminal_(isatty(fileno(stderr)) != 0) {}
  // fraction in [0, 1].
  void operator()(double fraction) {
    const int pct = int(fraction * 100);
    if (terminal_) {
      if (pct == shown_) return;
      std::fprintf(stderr, "\r%s: %3d%%", what_.c_str(), pct);
    } else {
      if (pct / 25 == shown_ / 25 && shown_ >= 0) return;
      std::fprintf(stderr, "%s: %d%%\n", what_.c_str(), pct / 25 * 25);
    }
    shown_ = pct;
  }
  // Ends the terminal's line (before a message or an error): nothing to do elsewhere.
  void done() {
    if (terminal_ && shown_ >= 0) std::fputc('\n', stderr);
    shown_ = -1;
  }

 private:
  std::string what_;
  bool terminal_;
  int shown_ = -1;
};

}  // namespace tokenhost
