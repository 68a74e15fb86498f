// The C ABI headers alone compile as C++11 with -Wall -Wextra -Werror -pedantic.
#include <tokenhost/tokenhost.h>

#include <cstdio>

int main() {
  std::printf("C ABI headers compile as C++%ld\n", long(__cplusplus));
  return 0;
}
