#!/usr/bin/perl
# What the module's own answers promise, and what a zone costs:
#
# * every answer of ratelimit_stats (JSON and Prometheus), ratelimit_api and
#   ratelimit_dashboard carries X-Content-Type-Options: nosniff and
#   Cache-Control: no-store (the dashboard's page: no-cache, it holds no
#   state), once each: successes, the key API's JSON errors (400, 403, 404,
#   405) and nginx's own error pages (a 405 of the stats or the page) alike;
# * a 1024m zone costs what its keys use: `nginx -t` and the running master
#   and workers stay under 50 MB of resident memory (VmHWM, the high-water
#   mark), the zone still limits, and a reload keeps it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest qw(json_of);

my $t = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /a/ {
        ratelimit zone=z key=$http_x_k limit=1 period=1h name=one log_key=on;
        alias %%PREFIX%%/html/;
    }
    location = /stats { ratelimit_stats; }
    location /api/ { ratelimit_api write=on; }
    location /ro/ { ratelimit_api; }
    location = /dashboard { ratelimit_dashboard stats=/stats api=/api/; }
}
EOF

# a key with markup, refused once: the API echoes it
my $key = '<script>alert(1)</script>';
$t->get('/a/index.html', { 'X-K' => $key }) for 1 .. 2;

# [ what, method, path, status, Cache-Control, a JSON body ]
my @answers = (
    [ 'stats, JSON', 'GET', '/stats', 200, 'no-store', 1 ],
    [ 'stats, Prometheus', 'GET', '/stats?format=prometheus', 200, 'no-store', 0 ],
    [ 'stats, HEAD', 'HEAD', '/stats', 200, 'no-store', 0 ],
    [ 'stats, POST (nginx\'s own 405 page)', 'POST', '/stats', 405, 'no-store', 0 ],
    [ 'API, zones', 'GET', '/api/zones', 200, 'no-store', 1 ],
    [ 'API, a zone', 'GET', '/api/zones/z', 200, 'no-store', 1 ],
    [ 'API, a key', 'GET', '/api/zones/z/keys?key=' . uri($key), 200, 'no-store', 1 ],
    [ 'API, top keys', 'GET', '/api/zones/z/top', 200, 'no-store', 1 ],
    [ 'API, a reset', 'DELETE', '/api/zones/z/keys?key=' . uri($key), 200, 'no-store', 1 ],
    [ 'API, HEAD', 'HEAD', '/api/zones', 200, 'no-store', 0 ],
    [ 'API error 400, a bad parameter', 'GET', '/api/zones/z/keys?key=' . uri($key) . '&colour=red', 400,
      'no-store', 1 ],
    [ 'API error 403, a write not enabled', 'DELETE', '/ro/zones/z/keys?key=a', 403, 'no-store', 1 ],
    [ 'API error 404, no such zone', 'GET', '/api/zones/' . uri($key), 404, 'no-store', 1 ],
    [ 'API error 404, no such resource', 'GET', '/api/nothing', 404, 'no-store', 1 ],
    [ 'API error 405', 'POST', '/api/zones', 405, 'no-store', 1 ],
    [ 'dashboard page', 'GET', '/dashboard', 200, 'no-cache', 0 ],
    [ 'dashboard POST (nginx\'s own 405 page)', 'POST', '/dashboard', 405, 'no-cache', 0 ],
);
for my $a (@answers) {
    my ($what, $method, $path, $status, $cache, $json) = @$a;
    my $r = $t->request($method, $path, {}, $method eq 'POST' ? 'x' : undef);
    is($r->{status}, $status, "$what: $status");
    # HTTP::Tiny makes a repeated header an array: a string is one header
    is($r->{headers}{'x-content-type-options'}, 'nosniff', "$what: X-Content-Type-Options: nosniff, once");
    is($r->{headers}{'cache-control'}, $cache, "$what: Cache-Control: $cache, once");
    if ($json) {
        is($r->{headers}{'content-type'}, 'application/json', "$what: JSON");
        ok(json_of($r), "$what: a JSON body") or diag($r->{content});
    }
}
# the key, echoed by the API, is JSON text in a JSON answer (nosniff: a
# browser never takes it for a page)
my $r = $t->get('/api/zones/z/keys?key=' . uri($key));
is(json_of($r)->{key}, $key, 'API: the key echoed, as JSON text');

sub uri {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

$t->stop();

# ---- a 1024m zone costs what its keys use ----

my $limit_kb = 50 * 1024;
my $zones = <<'EOF';
ratelimit_zone big 1024m;
ratelimit_zone blocks 1024m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=big key=$http_x_k limit=5 period=1h;
        ratelimit zone=blocks key=$http_x_k algorithm=sliding_window limit=50 period=1h;
        alias %%PREFIX%%/html/;
    }
}
EOF

SKIP: {
    skip 'no /usr/bin/time (Debian package "time"; ./build.sh test installs it)', 2 unless -x '/usr/bin/time';
    my $m = RLTest->new();
    $m->put_file('big.conf', $m->conf_text($zones));
    local $ENV{LD_PRELOAD} = $ENV{RL_PRELOAD} if $ENV{RL_PRELOAD};
    my $out = `/usr/bin/time -f 'maxrss %M' ${\ $m->nginx} -t -p ${\ $m->prefix}/ -c ${\ $m->prefix}/big.conf 2>&1`;
    like($out, qr/test is successful/, 'nginx -t: two 1024m zones, one with a pool of blocks') or diag($out);
    my ($kb) = $out =~ /maxrss (\d+)/;
    cmp_ok($kb // 1e9, '<', $limit_kb, "nginx -t: its maximum resident set is under 50 MB (${\ ($kb // '?')} kB)");
}

my $m = RLTest->new->start($zones, workers => 2);
my %st;
for my $k (1 .. 500) {
    $st{ $m->get('/index.html', { 'X-K' => "k$k" })->{status} }++;
}
is($st{200}, 500, '500 keys admitted');
is($m->statuses('/index.html', 5, { 'X-K' => 'k1' }), '200 200 200 200 429', 'the zone limits: k1\'s 6th request refused');

# each process's resident high-water mark (VmHWM) under the limit
sub hwm_under_limit {
    my ($when) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    for my $pid ($m->master_pid, $m->worker_pids) {
        my ($kb) = RLTest::read_file("/proc/$pid/status") =~ /^VmHWM:\s+(\d+) kB/m;
        my $who = $pid == $m->master_pid ? 'master' : "worker $pid";
        cmp_ok($kb // 1e9, '<', $limit_kb, "$when: the ${who}'s resident high-water mark is under 50 MB (${\ ($kb // '?')} kB)");
    }
}
hwm_under_limit('running');

$m->reload();
is($m->get('/index.html', { 'X-K' => 'k1' })->{status}, 429, 'reload: the zone kept, k1 still refused');
is($m->get('/index.html', { 'X-K' => 'k2' })->{status}, 200, 'reload: k2 admitted, its budget kept');
hwm_under_limit('after a reload');
$m->stop();

done_testing();
