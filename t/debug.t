#!/usr/bin/perl
# With nginx built --with-debug and its error log at debug: each decision
# as limit_req shows its own (the request's verdict, each rule's part: key
# by fingerprint, cost, remaining, waits), each request's end, and each
# Redis exchange (the call sent, the reply and its latency).  Without
# --with-debug the lines are not compiled in: the test is skipped (Debian's
# nginx is built --with-debug).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $nginx = $ENV{RL_NGINX} // '/usr/sbin/nginx';
my $V = `$nginx -V 2>&1`;
plan skip_all => "$nginx is not built --with-debug" unless $V =~ /--with-debug/;

my $secret = 'sk_live_debug_9f8e7d';

my $t = RLTest->new->start(<<'EOF', log_level => 'debug');
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=$http_x_key limit=2 period=1h name=two;
        ratelimit zone=z key=$http_x_key algorithm=concurrency limit=5 name=slots;
        alias %%PREFIX%%/html/;
    }
}
EOF

my $s = RLTest::statuses_of(map { $t->get('/index.html', { 'X-Key' => $secret }) } 1 .. 3);
is($s, '200 200 429', 'the third request of the key is refused');

my $log = $t->error_log;
my @passed = $log =~ /ratelimit: request passed, 2 rule\(s\)/g;
is(scalar @passed, 2, 'a line for each request passed');
like($log, qr/ratelimit: request rejected, 2 rule\(s\), delay 0 ms, binding 0/,
     'and for the one refused, naming its binding rule');
like($log, qr/ratelimit: rule "two" key [0-9a-f]{16} cost 1: allows, remaining 0/,
     "a rule's part: the key's fingerprint, cost, remaining");
like($log, qr/ratelimit: rule "two" key [0-9a-f]{16} cost 1: refuses, remaining 0, retry after \d+ ms/,
     'a refusal with its wait');
like($log, qr/ratelimit: request ended, 1 slot\(s\) given back/, "a request's end gives its slot back");
my @ours = grep { /ratelimit/ } split /\n/, $log;
ok(@ours >= 5, scalar(@ours) . ' lines of the module');
is_deeply([ grep { /\Q$secret\E/ } @ours ], [], "no byte of the key in the module's debug lines (nginx's own show the headers)");

SKIP: {
    skip('redis-server is not installed', 5) unless -x ($ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server');
    require RLRedis;
    my $redis = RLRedis->new->start;
    my $rport = $redis->port;
    my $r = RLTest->new->start(<<"EOF", log_level => 'debug');
ratelimit_zone fleet 1m redis=127.0.0.1:$rport;
ratelimit_zone synced 1m redis=127.0.0.1:$rport redis_sync=50ms;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=fleet key=\$http_x_key limit=1 period=1h name=one;
        alias %%PREFIX%%/html/;
    }
    location /synced/ {
        ratelimit zone=synced key=\$http_x_key algorithm=fixed_window limit=5 period=1h name=five;
        alias %%PREFIX%%/html/;
    }
}
EOF
    my $rs = RLTest::statuses_of(map { $r->get('/index.html', { 'X-Key' => 'k' }) } 1 .. 2);
    is($rs, '200 429', 'a Redis zone: the second request refused');
    my $rlog = $r->error_log;
    like($rlog, qr/ratelimit redis: call \d+ for 1 rule\(s\) sent to 127\.0\.0\.1:$rport/, 'the call sent, and where');
    like($rlog, qr/ratelimit redis: reply from 127\.0\.0\.1:$rport to call \d+: (decided|no script), after \d+ us/,
         'its reply, and after how long');
    # an exchange of redis_sync is a call with no request: its line too
    mkdir $r->prefix . '/html/synced';
    RLTest::write_file($r->prefix . '/html/synced/index.html', "ok\n");
    is($r->get('/synced/index.html', { 'X-Key' => 'k' })->{status}, 200, 'a redis_sync zone: the request served');
    $rlog = $r->wait_log(qr/ratelimit redis: call 64 for 0 rule\(s\) sent/);
    like($rlog, qr/ratelimit redis: call 64 for 0 rule\(s\) sent to 127\.0\.0\.1:$rport/, 'its exchange sent, logged');
    $r->stop();
}

$t->stop();
done_testing();
