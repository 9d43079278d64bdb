#!/usr/bin/perl
# gRPC callers refused as gRPC, through nginx: a real gRPC server behind
# grpc_pass and a real client (Debian's python3-grpcio, t/lib/RLGrpc.pm) on
# h2c.  A refused call fails with RESOURCE_EXHAUSTED (or the location's
# ratelimit_grpc_status), a message, grpc-retry-pushback-ms and the
# rate-limit metadata, in one Trailers-Only HEADERS frame; a client whose
# retry policy retries RESOURCE_EXHAUSTED waits the pushback; `off`, plain
# HTTP requests and GETs keep the HTTP status (and error_page); gRPC-Web
# gets its trailers frame in the body; dry run, shaping, stats,
# $ratelimit_status, a concurrency slot, a Redis zone and on_redis_error=deny
# each as they should.  Times are decided from the clocks of the client and
# of nginx's log, never from how fast the machine is.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use HTTP::Tiny;
use JSON::PP;
use MIME::Base64 qw(decode_base64);
use POSIX qw(ceil);
use Test::More;
use Time::HiRes qw(sleep time);
use RLTest;
use RLGrpc;

my $g = RLGrpc->new->start;
my $t = RLTest->new;
my ($gp, $hport, $dead) = ($g->port, RLTest::free_port(), RLTest::free_port());
my $redis;
if (-x ($ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server')) {
    require RLRedis;
    $redis = RLRedis->new->start;
}
my $h2c = RLGrpc::h2c_listen('127.0.0.1:%%PORT%%');
my $up = "grpc_pass grpc://127.0.0.1:$gp;";
my $redis_zone = $redis ? "ratelimit_zone fleet 1m redis=127.0.0.1:@{[ $redis->port ]} redis_timeout=5s;" : '';
my $redis_location = $redis ? "location /rl.Redis/ { ratelimit zone=fleet key=\$http_x_key limit=1 period=1h name=fleet; $up }" : '';

RLTest::write_file($t->prefix . '/html/sorry.html', "<html>slow down</html>\n");
$t->write_conf(<<"CONF");
ratelimit_zone grpc 1m;
ratelimit_zone down 1m redis=127.0.0.1:$dead redis_timeout=1s on_redis_error=deny;
$redis_zone
log_format grpc '\$msec \$request_time \$ratelimit_status \$status "\$sent_http_grpc_status" '
                '"\$sent_http_grpc_retry_pushback_ms" "\$http_x_key" \$uri';

server {
    $h2c
    listen 127.0.0.1:$hport;
    access_log %%PREFIX%%/grpc.log grpc;
    error_page 429 /sorry.html;

    location /rl.Test/ {
        ratelimit zone=grpc key=\$http_x_key limit=3 period=1h name=calls;
        ratelimit_headers both;
        $up
    }
    location /rl.Stream/ { ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=streams; $up }
    location /rl.Retry/ { ratelimit zone=grpc key=\$http_x_key limit=1 period=2s name=retry; $up }
    location /rl.Unavailable/ {
        ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=unavailable;
        ratelimit_grpc_status 14;
        $up
    }
    location /rl.Off/ {
        ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=off;
        ratelimit_grpc_status off;
        $up
    }
    location /rl.Quiet/ {
        ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=quiet;
        ratelimit_headers off;
        $up
    }
    location /rl.Dry/ {
        ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=dry;
        ratelimit_dry_run on;
        $up
    }
    location /rl.Shape/ {
        ratelimit zone=grpc key=\$http_x_key algorithm=leaky_bucket limit=5 period=1s name=shape;
        $up
    }
    location /rl.Slots/ { ratelimit zone=grpc key=\$http_x_key algorithm=concurrency limit=1 name=slots; $up }
    location /rl.Deny/ { ratelimit zone=down key=\$http_x_key limit=5 period=1h name=deny; $up }
    $redis_location
    location /rl.Web/ {
        ratelimit zone=grpc key=\$http_x_key limit=1 period=1h name=web;
        proxy_pass http://127.0.0.1:$hport/served;
    }
    location /served { ratelimit off; return 200 "served\\n"; }
    location = /sorry.html { ratelimit off; }
    location = /stats { ratelimit off; ratelimit_stats; }
}
CONF
$t->start;
my $target = '127.0.0.1:' . $t->port;

sub call {
    my ($method, $key, %o) = @_;
    return $g->call($target, { method => $method, metadata => [ [ 'x-key', $key ] ], %o });
}

sub calls {
    my ($method, $key, $n) = @_;
    return $g->call($target, map { { method => $method, metadata => [ [ 'x-key', $key ] ] } } 1 .. $n);
}

# nginx's log lines of a key: [msec, request_time, status, http status,
# grpc-status, pushback, uri], once there are $n of them (a line is written
# after its response went out: a client may have it first)
sub logged {
    my ($key, $n) = @_;
    my @lines;
    RLTest::wait_until(sub {
        @lines = ();
        for (split /\n/, RLTest::read_file($t->prefix . '/grpc.log')) {
            my @f = /^(\S+) (\S+) (\S*) (\d+) "([^"]*)" "([^"]*)" "([^"]*)" (\S+)$/ or next;
            push @lines, [ @f[0 .. 5], $f[7] ] if $f[6] eq $key;
        }
        return @lines >= $n;
    }, 10);
    return @lines;
}

# --- limit=3 period=1h: three calls served, the fourth refused as gRPC
{
    my @r = calls('/rl.Test/Unary', 'alice', 4);
    is(join(' ', map { $_->{code} } @r), 'OK OK OK RESOURCE_EXHAUSTED', 'calls 1-3 served, call 4 refused');
    is(join(' ', map { $_->{initial_md}{'x-ratelimit-remaining'} } @r[0 .. 2]), '2 1 0',
       'x-ratelimit-remaining 2, 1, 0 as metadata');
    is($r[0]{messages}[0], 'served:hello', 'the server answered');
    my $m = $r[3]{trailing_md};
    my $p = $m->{'grpc-retry-pushback-ms'};
    # one unit of gcra's 3 an hour comes back 1,200,000 ms after call 1:
    # less what passed between call 1 and call 4, at most
    my $passed = ceil(($r[3]{end} - $r[0]{start}) * 1000);
    ok($p =~ /^\d+$/ && $p <= 1200000 && $p >= 1200000 - $passed,
       "grpc-retry-pushback-ms $p: 1,200,000 less at most the $passed ms between calls 1 and 4");
    is($r[3]{details}, 'rate limit exceeded, retry in ' . ceil($p / 1000) . ' s', "the message: $r[3]{details}");
    is($m->{'retry-after'}, ceil($p / 1000), 'retry-after: the pushback in seconds, rounded up');
    is(join(' ', map { $m->{$_} // '-' } qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset)),
       '3 0 3600', 'x-ratelimit-* as metadata');
    is($m->{'ratelimit-policy'}, '"calls";q=3;w=3600', 'ratelimit-policy as metadata');
    is($m->{ratelimit}, '"calls";r=0;t=' . ceil($p / 1000), 'ratelimit as metadata');
    is(scalar @{ $r[3]{initial} }, 0, 'Trailers-Only: everything in the trailers, no initial metadata');
    is_deeply($r[3]{messages}, [], 'no message');
    unlike($r[3]{details} . join(' ', values %$m), qr/alice|grpc:/, 'no key and no configuration in it');

    my @l = logged('alice', 4);
    is(join(' ', map { "$_->[2]/$_->[3]/$_->[4]" } @l), 'PASSED/200/- PASSED/200/- PASSED/200/- REJECTED/200/8',
       '$ratelimit_status REJECTED, HTTP 200, grpc-status 8 in the log');
    is($l[3][5], $p, 'the pushback logged is the one the client got');

    my ($other) = call('/rl.Test/Unary', 'bob');
    is("$other->{code} $other->{initial_md}{'x-ratelimit-remaining'}", 'OK 2', 'another key is served');
}

# --- the answer on the wire: one HEADERS frame that ends the stream
SKIP: {
    my $curl = `curl --version 2>/dev/null` // '';
    skip 'no curl with HTTP/2', 4 unless $curl =~ /HTTP2/;
    my $out = `curl -s --http2-prior-knowledge -D - -o /dev/null -w 'size=%{size_download}' -X POST -H 'content-type: application/grpc+proto' -H 'x-key: alice' http://$target/rl.Test/Unary`;
    like($out, qr{^HTTP/2 200 ?\r$}m, 'curl: HTTP/2 200');
    like($out, qr{^content-type: application/grpc\+proto\r$}m, "the request's own gRPC content type");
    like($out, qr{^grpc-status: 8\r$}m, 'grpc-status: 8 in the headers');
    like($out, qr{size=0$}, 'no body');
}

# --- a server-streaming call served, then refused the same way
{
    my @r = calls('/rl.Stream/Stream', 'carol', 2);
    is("$r[0]{code} @{ $r[0]{messages} }", 'OK m0 m1 m2', 'a streaming call served');
    is($r[0]{initial_md}{'x-ratelimit-remaining'}, 0, '... with its metadata');
    is($r[1]{code}, 'RESOURCE_EXHAUSTED', 'the next streaming call refused');
    like($r[1]{details}, qr/^rate limit exceeded, retry in 360[01] s$/, "... with a message: $r[1]{details}");
    my $p = $r[1]{trailing_md}{'grpc-retry-pushback-ms'};
    ok($p > 3600000 - ceil(($r[1]{end} - $r[0]{start}) * 1000) && $p <= 3600000, "... and a pushback: $p");
    is_deeply($r[1]{messages}, [], '... and no message');
}

# --- a client retrying RESOURCE_EXHAUSTED waits the pushback, not its backoff
{
    my $config = { methodConfig => [ { name => [ { service => 'rl.Retry' } ], retryPolicy => {
        maxAttempts => 3, initialBackoff => '0.05s', maxBackoff => '0.1s', backoffMultiplier => 2,
        retryableStatusCodes => ['RESOURCE_EXHAUSTED'] } } ] };
    my $tested;
    # a slow machine may take 2 s between two calls: then there was nothing
    # to retry, and it goes again with another key
    for my $try (1 .. 3) {
        my $key = "retry$try";
        my @r = $g->call($target, map { { method => '/rl.Retry/Unary', metadata => [ [ 'x-key', $key ] ],
                                          service_config => $config } } 1 .. 2);
        # served at once: 2 lines; retried: 3
        my @l = logged($key, $r[1]{end} - $r[1]{start} > 1 ? 3 : 2);
        next unless grep { $_->[2] eq 'REJECTED' } @l;
        $tested = 1;
        # a client's timer may fire a millisecond or two before the pushback
        # ends (the wait is checked below within 2 ms): that attempt is
        # refused again, with what is left, and its third one admitted
        @l = logged($key, 4) if @l == 3 && $l[2][2] eq 'REJECTED';
        is("$r[0]{code} $r[1]{code}", 'OK OK', 'the retried call is served');
        is(join(' ', map { $_->[2] } @l), @l == 4 ? 'PASSED REJECTED REJECTED PASSED' : 'PASSED REJECTED PASSED',
           'one attempt refused, the retry admitted');
        ok($l[2][5] <= 2, "a retry before the pushback ended: refused with what was left ($l[2][5] ms)") if @l == 4;
        my ($served, $refused, $retry) = @l[0, 1, -1];
        my $p = $refused->[5];
        # the refusal's pushback: what was left of call 1's 2 s, each
        # decided at a time between its request's start and its log line
        my ($lo, $hi) = map { int($_ * 1000 + 0.5) }
            $served->[0] - $served->[1] + 2 - $refused->[0], $served->[0] + 2 - $refused->[0] + $refused->[1];
        ok($p >= $lo - 1 && $p <= $hi + 1, "pushback $p ms: what call 1 left of its 2 s ($lo to $hi)");
        ok($p > 1000, "about 2 s: far more than the client's own backoff (50 to 100 ms)");
        my $waited = int(($retry->[0] - $refused->[0]) * 1000 + 0.5);
        ok($waited >= $p - 2, "the client waited $waited ms before retrying: the pushback, $p ms");
        last;
    }
    ok($tested, 'a refusal to retry happened (in at most three tries)');
}

# --- ratelimit_grpc_status 14: UNAVAILABLE; off: HTTP 429 as before
{
    my @r = calls('/rl.Unavailable/Unary', 'dave', 2);
    is("$r[0]{code} $r[1]{code}", 'OK UNAVAILABLE', 'ratelimit_grpc_status 14: UNAVAILABLE');
    like($r[1]{details}, qr/^rate limit exceeded, retry in \d+ s$/, '... with the message');
    ok($r[1]{trailing_md}{'grpc-retry-pushback-ms'} > 0, '... and the pushback');

    @r = calls('/rl.Off/Unary', 'dave', 2);
    is("$r[0]{code} $r[1]{code}", 'OK UNAVAILABLE', 'off: the HTTP answer, which gRPC reads as UNAVAILABLE');
    like($r[1]{details}, qr/429/, "... from HTTP 429: $r[1]{details}");
    ok(!exists $r[1]{trailing_md}{'grpc-retry-pushback-ms'}, '... and no pushback');
    is((logged('dave', 4))[-1][3], 429, 'off: 429 in the log');
}

# --- ratelimit_headers off: no rate-limit metadata, the gRPC answer stays
{
    my @r = calls('/rl.Quiet/Unary', 'kate', 2);
    is("$r[0]{code} $r[1]{code}", 'OK RESOURCE_EXHAUSTED', 'ratelimit_headers off: refused as gRPC');
    like($r[1]{details}, qr/^rate limit exceeded, retry in 360[01] s$/, '... with the message');
    ok($r[1]{trailing_md}{'grpc-retry-pushback-ms'} > 3590000, '... and the pushback');
    is(join(' ', grep { /ratelimit|retry-after/ } sort keys %{ $r[1]{trailing_md} }), '',
       '... and no rate-limit metadata');
}

# --- plain HTTP in the same location: 429, Retry-After and error_page
{
    my $http = HTTP::Tiny->new(timeout => 10);
    my $url = "http://127.0.0.1:$hport/rl.Test/Unary";
    my $r = $http->get($url, { headers => { 'X-Key' => 'alice' } });
    is("$r->{status} $r->{content}", "429 <html>slow down</html>\n", 'a plain GET: 429, and the error_page');
    ok($r->{headers}{'retry-after'} >= 1, '... with Retry-After');
    ok(!exists $r->{headers}{'grpc-status'}, '... and no grpc-status');
    $r = $http->get($url, { headers => { 'X-Key' => 'alice', 'Content-Type' => 'application/grpc' } });
    is($r->{status}, 429, 'a GET with a gRPC content type is no gRPC call (its 200 could be cached): 429');
    $r = $http->post($url, { headers => { 'X-Key' => 'alice', 'Content-Type' => 'application/json' },
                             content => '{}' });
    is($r->{status}, 429, 'a POST of JSON: 429');
    $http = HTTP::Tiny->new(timeout => 10, keep_alive => 1);
    $r = $http->post($url, { headers => { 'X-Key' => 'alice', 'Content-Type' => 'application/grpc' },
                             content => "\0\0\0\0\0" });
    is("$r->{status} $r->{headers}{'content-length'} $r->{headers}{'grpc-status'}", '200 0 8',
       'a gRPC POST over HTTP/1.1: the Trailers-Only answer, of length 0');
    $r = $http->get("http://127.0.0.1:$hport/served");
    is($r->{status}, 200, '... and the connection goes on');
}

# --- gRPC-Web over HTTP/1.1: the trailers frame in the body
{
    my $http = HTTP::Tiny->new(timeout => 10, keep_alive => 1);
    my $url = "http://127.0.0.1:$hport/rl.Web/Unary";
    my %h = ('X-Key' => 'erin', 'Content-Type' => 'application/grpc-web+proto', 'X-Grpc-Web' => '1');
    my $r = $http->post($url, { headers => \%h, content => "\0\0\0\0\0" });
    is("$r->{status} $r->{content}", "200 served\n", 'gRPC-Web: the first call served');
    $r = $http->post($url, { headers => \%h, content => "\0\0\0\0\0" });
    is($r->{status}, 200, 'gRPC-Web refused: HTTP 200');
    is($r->{headers}{'content-type'}, 'application/grpc-web+proto', "... the request's content type");
    my $body = $r->{content};
    is(length($body), $r->{headers}{'content-length'}, '... a body of its Content-Length');
    my ($flags, $len) = unpack('CN', $body);
    is(sprintf('0x%02x %d', $flags, $len), sprintf('0x80 %d', length($body) - 5), '... one trailers frame');
    my %tr = map { /^([^:]+): (.*)$/ } split /\r\n/, substr($body, 5);
    is($tr{'grpc-status'}, 8, 'grpc-status: 8 in the trailers frame');
    like($tr{'grpc-message'}, qr/^rate limit exceeded, retry in 360[01] s$/, '... grpc-message');
    ok($tr{'grpc-retry-pushback-ms'} > 3590000, '... grpc-retry-pushback-ms');
    ok(!exists $r->{headers}{'grpc-status'}, 'not in the headers too (a client would see it twice)');
    is($r->{headers}{'x-ratelimit-remaining'}, 0, 'the rate-limit headers');
    ok($r->{headers}{'retry-after'} >= 3599, '... and Retry-After');

    $h{'Content-Type'} = 'application/grpc-web-text';
    $r = $http->post($url, { headers => \%h, content => 'AAAAAAA=' });
    is("$r->{status} $r->{headers}{'content-type'}", '200 application/grpc-web-text', 'grpc-web-text: 200');
    like($r->{content}, qr/^[A-Za-z0-9+\/]+=*$/, '... a base64 body');
    my $frame = decode_base64($r->{content});
    like(substr($frame, 5), qr/^grpc-status: 8\r\ngrpc-message: rate limit exceeded, retry in \d+ s\r\n/,
         '... of the trailers frame');
    $r = $http->get("http://127.0.0.1:$hport/served");
    is($r->{status}, 200, 'the connection goes on after it');
}

# --- dry run and shaping as for HTTP
{
    my @r = calls('/rl.Dry/Unary', 'frank', 2);
    is("$r[0]{code} $r[1]{code}", 'OK OK', 'dry run: both served');
    is(join(' ', map { $_->[2] } logged('frank', 2)), 'PASSED REJECTED_DRY_RUN', '... REJECTED_DRY_RUN');

    @r = calls('/rl.Shape/Unary', 'gina', 3);
    is(join(' ', map { $_->{code} } @r), 'OK OK OK', 'shaping: served');
    is(join(' ', map { $_->[2] } logged('gina', 3)), 'PASSED DELAYED DELAYED', '... the calls over the pace delayed');
    ok($r[2]{end} - $r[0]{start} >= 0.4 - 0.002, 'at 5 a second: the third call at least 400 ms after the first');
}

# --- a concurrency slot: no time to wait for, so no pushback
{
    my $bg = $g->call_background($target, { method => '/rl.Slots/Hold', metadata => [ [ 'x-key', 'hank' ] ] });
    RLTest::wait_until(sub { -e $g->dir . '/held' }, 30) or BAIL_OUT('the held call never reached the server');
    my ($r) = call('/rl.Slots/Unary', 'hank');
    is($r->{code}, 'RESOURCE_EXHAUSTED', 'concurrency: a call with no slot refused');
    is($r->{details}, 'rate limit exceeded, too many calls in flight', "... $r->{details}");
    ok(!exists $r->{trailing_md}{'grpc-retry-pushback-ms'}, "... no pushback: the client's own backoff");
    ok(!exists $r->{trailing_md}{'retry-after'}, '... and no retry-after');
    RLTest::write_file($g->dir . '/release', '');
    my ($held) = $g->wait_call($bg);
    is($held->{code}, 'OK', 'the call holding the slot served');
    ($r) = call('/rl.Slots/Unary', 'hank');
    is($r->{code}, 'OK', 'the slot back: served');
}

# --- Redis: on_redis_error=deny, and a refusal decided in Redis
{
    my ($r) = call('/rl.Deny/Unary', 'ivan');
    is($r->{code}, 'RESOURCE_EXHAUSTED', 'on_redis_error=deny: refused as gRPC');
    is($r->{details}, 'rate limit exceeded', '... with the message and no time');
    ok(!exists $r->{trailing_md}{'grpc-retry-pushback-ms'}, '... and no pushback');
}
SKIP: {
    skip 'no redis-server: ./build.sh test installs it', 3 unless $redis;
    my @r = calls('/rl.Redis/Unary', 'judy', 2);
    is("$r[0]{code} $r[1]{code}", 'OK RESOURCE_EXHAUSTED', 'a Redis zone: refused as gRPC');
    like($r[1]{details}, qr/^rate limit exceeded, retry in 360[01] s$/, "... $r[1]{details}");
    ok($r[1]{trailing_md}{'grpc-retry-pushback-ms'} > 3590000, '... with the pushback');
}

# --- stats count gRPC refusals as any
{
    my $s = decode_json(HTTP::Tiny->new->get("http://127.0.0.1:$hport/stats")->{content});
    my $calls = $s->{zones}{grpc}{rules}{calls};
    # alice: 1 call refused, 1 by curl, 4 over HTTP/1.1 (the GET of a
    # gRPC type too)
    is($calls->{rejected}, 1 + 1 + 4, 'stats: the refusals of rule calls');
    is($calls->{allowed}, 4, '... and its admissions');
}

$t->stop;
$redis->stop if $redis;
$g->stop;

done_testing;
