// The admin API's A/B experiment routes: /admin/experiments (list, start), /admin/experiments/NAME
// (change the split, stop) and /admin/experiments/NAME/report. The token check is the admin server's.
#pragma once

#include "http/http_listener.hpp"

namespace tokenhost {

class Server;

void add_experiment_routes(HttpListener& admin, Server& server);

}  // namespace tokenhost
