/* The SDK headers compile as strict C99 (with abi_layout.c, built with -Wall -Wextra -Werror -pedantic). */
#include <tokenhost/tokenhost.h>

int tokenhost_headers_compile_as_c99(void) { return TH_ABI_VERSION_MAJOR; }
