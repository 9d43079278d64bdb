#!/usr/bin/perl
# Redis over TLS and with ACL users: Debian's redis-server on a tls-port
# with a CA and certificates this test makes.  The limit holds exactly over
# TLS; a certificate not trusted, a name not matching, a client certificate
# missing, a wrong password or an ACL user without the script's commands
# each leave the requests to on_redis_error and say why in one line (not
# one a reconnection); a reconnection resumes the TLS session; the docs'
# example runs as written.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;
use RLCerts;
use IO::Socket::INET;
use Time::HiRes qw(time);

my $missing = RLTest::ssl_missing() || RLRedis::tls_missing();
plan(skip_all => $missing) if $missing;
my $certs = RLCerts::make() or plan(skip_all => 'no openssl command to make certificates');

# --- nginx -t: each bad parameter named, with what is allowed
{
    my $c = RLTest->new();
    my $z = 'ratelimit_zone r 1m redis=127.0.0.1:6379';
    my $dir = $certs->{dir};
    RLTest::write_file("$dir/empty", '');
    RLTest::write_file("$dir/two-lines", "one\ntwo\n");
    RLTest::write_file("$dir/crlf", "s3cret\r\n");
    for my $case (
        [ 'redis_tls not on or off', "$z redis_tls=yes;", qr/invalid "redis_tls=yes" of zone "r": expected redis_tls=on\|off/ ],
        [ 'redis_tls_verify not on or off', "$z redis_tls=on redis_tls_verify=maybe;",
          qr/invalid "redis_tls_verify=maybe" of zone "r": expected redis_tls_verify=on\|off/ ],
        [ 'a TLS parameter without redis_tls=on', "$z redis_tls_ca=$certs->{ca};",
          qr/"ratelimit_zone" directive: redis_tls_ca= of zone "r" needs redis_tls=on/ ],
        [ 'redis_tls_ca not there', "$z redis_tls=on redis_tls_ca=$dir/nothing.pem;",
          qr/"redis_tls_ca=\Q$dir\E\/nothing.pem" of zone "r": cannot read "\Q$dir\E\/nothing.pem" \(2: No such file/ ],
        [ 'redis_tls_ca not PEM', "$z redis_tls=on redis_tls_ca=$dir/two-lines;",
          qr/"redis_tls_ca=\Q$dir\E\/two-lines" of zone "r": not PEM certificates/ ],
        [ 'redis_tls_cert without its key', "$z redis_tls=on redis_tls_cert=$certs->{client_crt};",
          qr/zone "r" has redis_tls_cert= without redis_tls_key=: a client certificate needs both/ ],
        [ 'a key not of the certificate', "$z redis_tls=on redis_tls_cert=$certs->{client_crt} redis_tls_key=$certs->{server_key};",
          qr/"redis_tls_cert=\S+client.crt" and "redis_tls_key=\S+server.key" of zone "r": not a PEM certificate and its key/ ],
        [ 'redis_tls_name not a name', "$z redis_tls=on redis_tls_name=a/b;",
          qr/invalid "redis_tls_name=a\/b" of zone "r": a character not in a host name or an address; expected redis_tls_name=NAME, a host name or an IP address/ ],
        [ 'redis_user empty', "$z redis_user= redis_password=p;", qr/invalid "redis_user=" of zone "r": expected redis_user=NAME of 1 to 256 bytes/ ],
        [ 'redis_user without a password', "$z redis_user=limiter;",
          qr/"redis_user=limiter" of zone "r" needs redis_password= or redis_password_file= \(AUTH user password\)/ ],
        [ 'a password twice', "$z redis_password=p redis_password_file=$dir/crlf;",
          qr/zone "r" has both redis_password= and redis_password_file=: give one/ ],
        [ 'a password file not there', "$z redis_password_file=$dir/nothing;",
          qr/"redis_password_file=\Q$dir\E\/nothing" of zone "r": cannot open "\Q$dir\E\/nothing" \(2: No such file/ ],
        [ 'an empty password file', "$z redis_password_file=$dir/empty;",
          qr/"redis_password_file=\Q$dir\E\/empty" of zone "r": it is empty; expected a file of one line, the password/ ],
        [ 'a password file of two lines', "$z redis_password_file=$dir/two-lines;",
          qr/"redis_password_file=\Q$dir\E\/two-lines" of zone "r": it holds more than one line/ ],
        [ 'an unknown TLS parameter', "$z redis_tls_colour=red;",
          qr/unknown parameter "redis_tls_colour=red" of zone "r": expected redis=, redis_timeout=, .*redis_user=, .*redis_tls=, redis_tls_verify=, redis_tls_ca=, redis_tls_name=, redis_tls_cert=, redis_tls_key= or on_redis_error=/ ],
    ) {
        my ($what, $body, $re) = @$case;
        $c->conf_refused($body, $re, $what);
    }
    for my $case (
        [ 'TLS without verification, no CA', "$z redis_tls=on redis_tls_verify=off;" ],
        [ 'TLS with the system\'s CAs and a name', "$z redis_tls=on redis_tls_name=redis.test;" ],
        [ 'TLS to an address, a client certificate', "$z redis_tls=on redis_tls_ca=$certs->{ca} redis_tls_name=127.0.0.1 redis_tls_cert=$certs->{client_crt} redis_tls_key=$certs->{client_key};" ],
        [ 'a password file ending in CRLF, an ACL user', "$z redis_user=limiter redis_password_file=$dir/crlf;" ],
    ) {
        my ($rc, $out) = $c->test_conf($case->[1]);
        is($rc, 0, "nginx -t passes: $case->[0]") or diag($out);
    }
}

my $redis = RLRedis->new(tls => $certs, auth_clients => 'optional')->start;
my $strict = RLRedis->new(tls => $certs, auth_clients => 'yes')->start;
my ($tport, $sport) = ($redis->tls_port, $strict->tls_port);

# ACL users: one with the library's commands, the script's, and its keys
# only (as docs/redis.md advises), one without MGET, one allowed scripts
# but not FCALL (as Redis 6 has them: the script is called instead), one
# without FCALL, FUNCTION, EVALSHA and EVAL
is($redis->cmd(qw(ACL SETUSER limiter on >lim1ter resetkeys ~ratelimit:* -@all +fcall +function|load
                  +get +mget +set +del +pexpire +lrange +ltrim +rpush +time)), 'OK', 'ACL user limiter');
is($redis->cmd(qw(ACL SETUSER nomget on >n0mget resetkeys ~ratelimit:* -@all +fcall +function|load
                  +get +set +del +pexpire +lrange +ltrim +rpush +time)), 'OK', 'ACL user nomget');
is($redis->cmd(qw(ACL SETUSER scripts on >scr1pts resetkeys ~ratelimit:* -@all
                  +evalsha +eval +get +mget +set +del +pexpire +lrange +ltrim +rpush +time)), 'OK', 'ACL user scripts');
is($redis->cmd(qw(ACL SETUSER noscript on >n0script ~* +@all -fcall -function -evalsha -eval)), 'OK',
   'ACL user noscript');

my $pwfile = "$certs->{dir}/password";
RLTest::write_file($pwfile, "lim1ter\n");

my %zone = (
    tls      => "redis_tls=on redis_tls_ca=$certs->{ca}",
    named    => "redis_tls=on redis_tls_ca=$certs->{ca} redis_tls_name=redis.test",
    wrongca  => "redis_tls=on redis_tls_ca=$certs->{other_ca}",
    noverify => "redis_tls=on redis_tls_verify=off",
    badname  => "redis_tls=on redis_tls_ca=$certs->{ca} redis_tls_name=other.test",
    acl      => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=limiter redis_password=lim1ter redis_prefix=ratelimit:acl:",
    aclfile  => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=limiter redis_password_file=$pwfile redis_prefix=ratelimit:f:",
    nomget   => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=nomget redis_password=n0mget redis_prefix=ratelimit:nm:",
    scripts  => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=scripts redis_password=scr1pts redis_prefix=ratelimit:s:",
    noperm   => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=noscript redis_password=n0script on_redis_error=deny",
    wrongpw  => "redis_tls=on redis_tls_ca=$certs->{ca} redis_user=limiter redis_password=wrong on_redis_error=deny",
    plain    => "",   # plain TCP to a TLS port
);
# TLS to Redis's plain port; TLS to a port that accepts and never answers
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 16) or die;
my %other_zone = (
    toplain  => [ $redis->port, "redis_tls=on redis_tls_ca=$certs->{ca}" ],
    silent   => [ $silent->sockport, "redis_tls=on redis_tls_ca=$certs->{ca} redis_timeout=300ms" ],
);
my %strict_zone = (
    cert     => "redis_tls=on redis_tls_ca=$certs->{ca} redis_tls_cert=$certs->{client_crt} redis_tls_key=$certs->{client_key}",
    nocert   => "redis_tls=on redis_tls_ca=$certs->{ca}",
);

my $conf = "log_format rl '\$uri \$status \$ratelimit_decided_by';\naccess_log %%PREFIX%%/rl.log rl;\n";
my $locations = '';
for my $z (sort keys %zone, sort keys %strict_zone, sort keys %other_zone) {
    my $port = $strict_zone{$z} ? $sport : $other_zone{$z} ? $other_zone{$z}[0] : $tport;
    my $params = $zone{$z} // $strict_zone{$z} // $other_zone{$z}[1];
    my $deny = $params =~ /on_redis_error/ ? '' : ' on_redis_error=deny';
    my $timeout = $params =~ /redis_timeout/ ? '' : ' redis_timeout=1s';
    $conf .= "ratelimit_zone $z 1m redis=127.0.0.1:$port$timeout $params$deny;\n";
    $locations .= "    location /$z/ { ratelimit zone=$z key=\$http_x_key limit=3 period=1h; alias %%PREFIX%%/html/; }\n";
}
# a stack of rules on one key, whose states the script reads in one MGET
for my $z (qw(acl nomget)) {
    $locations .= "    location /$z-stack/ { ratelimit zone=$z key=\$http_x_key limit=3 period=1h name=${z}_1;"
                . " ratelimit zone=$z key=\$http_x_key algorithm=sliding_window limit=5 period=1h name=${z}_2;"
                . " alias %%PREFIX%%/html/; }\n";
}
# the same with charge=: as each request ends, a second call settles the
# stack, its states read in one MGET too
for my $z (qw(acl nomget)) {
    $locations .= "    location /$z-charged/ { ratelimit zone=$z key=\$http_x_key limit=10 period=1h charge=3 name=${z}_c1;"
                . " ratelimit zone=$z key=\$http_x_key algorithm=sliding_window limit=10 period=1h charge=3 name=${z}_c2;"
                . " alias %%PREFIX%%/html/; }\n";
}
$conf .= "server {\n    listen 127.0.0.1:%%PORT%%;\n$locations    location /stats { ratelimit_stats; }\n}\n";

my $t = RLTest->new->start($conf);

sub stats { $t->zone_stats($_[0])->{redis} }

# --- a TLS zone: exact, decided in Redis
{
    my @r = map { $t->get('/tls/index.html', { 'X-Key' => 'exact' }) } 1 .. 4;
    is(RLTest::statuses_of(@r), '200 200 200 429', 'over TLS: 3 admitted, the 4th refused');
    is($r[3]{headers}{'retry-after'}, 1200, 'Retry-After exact: a third of an hour');
    is($r[2]{headers}{'x-ratelimit-remaining'} // $r[2]{headers}{'ratelimit-remaining'}, 0, 'the 3rd leaves 0')
        if exists $r[2]{headers}{'x-ratelimit-remaining'} || exists $r[2]{headers}{'ratelimit-remaining'};
    $t->log_like(qr{^/tls/index.html 429 redis$}m, 'decided in Redis', file => 'rl.log');
    my $keys = $redis->cmd('KEYS', 'ratelimit:*');
    is(scalar(@$keys), 1, 'its key is in Redis');
    is(stats('tls')->{tls_failures}, 0, 'no TLS failure');
    is($t->get('/named/index.html', { 'X-Key' => 'n' })->{status}, 200, 'redis_tls_name=redis.test matches the certificate');
    $t->log_like(qr{^/named/index.html 200 redis$}m, 'and Redis decides', file => 'rl.log');
}

# --- a certificate not trusted: on_redis_error, one clear line however many
# reconnections
{
    my @s = map { $t->get('/wrongca/index.html', { 'X-Key' => "w$_" })->{status} } 1 .. 3;
    is("@s", '429 429 429', 'a CA that did not sign it: decided by on_redis_error=deny');
    $t->log_like(qr{^/wrongca/index.html 429 fallback_deny$}m, 'fallback_deny', file => 'rl.log');
    # several reconnections (backoff from 100 ms)
    ok(RLTest::wait_until(sub { $t->get('/wrongca/index.html', { 'X-Key' => 'again' }); stats('wrongca')->{tls_failures} >= 3 }, 10),
       'it tries again, and fails each time (tls_failures ' . stats('wrongca')->{tls_failures} . ')');
    my @lines = $t->error_log =~ /^.*redis 127\.0\.0\.1:$tport: TLS: the server's certificate is not trusted.*$/mg;
    is(scalar(@lines), 1, 'one line for all of them') or diag(join "\n", @lines);
    like($lines[0] // '', qr/\[error\].*not trusted \((unable to get local issuer certificate|self[- ]signed certificate in certificate chain)\) by redis_tls_ca=\Q$certs->{other_ca}\E, \d+ requests decided by on_redis_error/,
         'it says why, and which CA file');
}

# --- no verification: the same server accepted
is($t->statuses('/noverify/index.html', 4, { 'X-Key' => 'nv' }), '200 200 200 429', 'redis_tls_verify=off: decided in Redis');
$t->log_like(qr{^/noverify/index.html 429 redis$}m, 'by Redis', file => 'rl.log');

# --- a name the certificate does not hold
is($t->get('/badname/index.html', { 'X-Key' => 'b' })->{status}, 429, 'redis_tls_name=other.test: refused, on_redis_error=deny');
$t->log_like(qr/redis 127\.0\.0\.1:$tport: TLS: the server's certificate does not name "other\.test" \(redis_tls_name\)/,
             'the log names the name');

# --- client certificates (tls-auth-clients yes)
is($t->statuses('/cert/index.html', 4, { 'X-Key' => 'c' }), '200 200 200 429', 'with a client certificate: decided in Redis');
$t->log_like(qr{^/cert/index.html 429 redis$}m, 'by Redis', file => 'rl.log');
{
    my @s = map { $t->get('/nocert/index.html', { 'X-Key' => "nc$_" })->{status} } 1 .. 3;
    like("@s", qr/^429 429 429$/, 'without one: refused by the server, on_redis_error=deny');
    my $re = qr/^.*redis 127\.0\.0\.1:$sport: TLS: .*\(the server asked for a client certificate, and none is configured: redis_tls_cert=, redis_tls_key=\).*$/m;
    $t->log_like($re, 'the log says the server asked for a client certificate');
    ok(RLTest::wait_until(sub { $t->get('/nocert/index.html', { 'X-Key' => 'again' }); stats('nocert')->{tls_failures} >= 3 }, 10),
       'tried again: tls_failures ' . stats('nocert')->{tls_failures});
    my @lines = $t->error_log =~ /$re/g;
    my @all = $t->error_log =~ /^.*redis 127\.0\.0\.1:$sport: .*requests decided.*$/mg;
    is(scalar(@all), 1, 'one line for all of them') or diag(join "\n", @all);
}

# --- ACL users
is($t->statuses('/acl/index.html', 4, { 'X-Key' => 'a' }), '200 200 200 429', 'an ACL user with the script\'s commands: exact');
$t->log_like(qr{^/acl/index.html 429 redis$}m, 'decided in Redis', file => 'rl.log');
is(scalar(@{ $redis->cmd('KEYS', 'ratelimit:acl:*') }), 1, 'its key in Redis');
is($t->statuses('/aclfile/index.html', 4, { 'X-Key' => 'a' }), '200 200 200 429', 'redis_password_file: the same');
$t->log_like(qr{^/aclfile/index.html 429 redis$}m, 'decided in Redis', file => 'rl.log');

# a stack: the states read in one MGET, or by a user without it one GET each
for my $z (qw(acl nomget)) {
    is($t->statuses("/$z-stack/index.html", 4, { 'X-Key' => 's' }), '200 200 200 429', "$z: a stack of two rules, exact");
    $t->log_like(qr{^/$z-stack/index.html 429 redis$}m, "$z: decided in Redis", file => 'rl.log');
}
is(scalar(@{ $redis->cmd('KEYS', 'ratelimit:nm:*') }), 2, 'nomget: both rules\' keys in Redis');
is(stats('nomget')->{fallbacks}, 0, 'nomget: no fallback');

# a charged stack: each request is charged 3 of each rule's 10 as it ends,
# and reserves a third of the limit (4) while it runs; the settling call
# reads both states in one MGET (the user without it, one GET each)
sub mget_calls { ($redis->cmd('INFO', 'commandstats') =~ /^cmdstat_mget:calls=(\d+)/m)[0] // 0 }
for my $z (qw(acl nomget)) {
    my $charged = sub { join ' ', map { $t->rule_stats($z, "${z}_$_")->{charged} // 0 } qw(c1 c2) };
    my $mget = mget_calls();
    my @left;
    for my $n (1 .. 3) {
        my $r = $t->get("/$z-charged/index.html", { 'X-Key' => 'c' });
        is($r->{status}, 200, "$z: charged stack, request $n admitted");
        push @left, $r->{headers}{'x-ratelimit-remaining'};
        my $want = join ' ', (3 * $n) x 2;
        ok(RLTest::wait_until(sub { $charged->() eq $want }, 10), "$z: each rule charged 3 as request $n ended")
            or diag('charged: ' . $charged->());
    }
    is("@left", '6 3 0', "$z: each request finds what the ones before were charged, less its reservation");
    # (an MGET the ACL refuses is counted apart from the calls Redis ran)
    is(mget_calls() - $mget, $z eq 'acl' ? 6 : 0,
       $z eq 'acl' ? "$z: one MGET a decision and one a settling call" : "$z: no MGET run");
    is(stats($z)->{fallbacks}, 0, "$z: no fallback");
}

# a user allowed scripts only: the script instead of the library, said once
# a connection
is($t->statuses('/scripts/index.html', 4, { 'X-Key' => 's' }), '200 200 200 429',
   'an ACL user without FCALL: exact, the script called instead');
$t->log_like(qr{^/scripts/index.html 429 redis$}m, 'decided in Redis', file => 'rl.log');
$t->log_like(qr/\[notice\].*redis 127\.0\.0\.1:$tport: FCALL unknown or not allowed: the script called with EVALSHA/,
             'the log says the script is called instead');
is(stats('scripts')->{fallbacks}, 0, 'scripts: no fallback');
is(stats('scripts')->{errors}, 0, 'scripts: no error');

is($t->get('/noperm/index.html', { 'X-Key' => 'p' })->{status}, 429,
   'an ACL user without FCALL and EVALSHA: on_redis_error=deny');
$t->log_like(qr{^/noperm/index.html 429 fallback_deny$}m, 'fallback_deny', file => 'rl.log');
$t->log_like(qr/\[error\].*redis 127\.0\.0\.1:$tport: .*"NOPERM[^"]*evalsha/i, 'the log shows Redis\'s NOPERM for evalsha');

is($t->get('/wrongpw/index.html', { 'X-Key' => 'p' })->{status}, 429, 'a wrong password: on_redis_error=deny');
$t->log_like(qr/redis 127\.0\.0\.1:$tport: refused AUTH, SELECT or ASKING: "WRONGPASS/, 'the log says WRONGPASS');

# --- plain TCP to a TLS port: no reply within redis_timeout, on_redis_error
is($t->get('/plain/index.html', { 'X-Key' => 'p' })->{status}, 429, 'plain TCP to the tls-port: on_redis_error=deny');

# --- TLS to a plain port; to a port that never answers
is($t->get('/toplain/index.html', { 'X-Key' => 'p' })->{status}, 429, 'TLS to Redis\'s plain port: on_redis_error=deny');
# (Redis waits for the end of a command line that a ClientHello never sends)
$t->log_like(qr/redis 127\.0\.0\.1:${\ $redis->port}: TLS handshake timed out \(is it Redis's tls-port\?\)/,
             'the log says the handshake timed out, and asks whether it is the tls-port');
{
    my $t0 = time;
    is($t->get('/silent/index.html', { 'X-Key' => 's' })->{status}, 429, 'a server that never answers the handshake: on_redis_error=deny');
    my $took = time - $t0;
    cmp_ok($took, '>=', 0.25, 'after redis_timeout');
    $t->log_like(qr{^/silent/index.html 429 fallback_deny$}m, 'fallback_deny', file => 'rl.log');
    $t->log_like(qr/redis 127\.0\.0\.1:${\ $silent->sockport}: (TLS handshake )?timed out/, 'the log says it timed out');
}

# --- a reload keeps TLS working (the new configuration's context)
$t->reload;
is($t->statuses('/tls/index.html', 4, { 'X-Key' => 'reloaded' }), '200 200 200 429', 'after a reload: exact over TLS');
$t->log_like(qr{^/tls/index.html 429 redis$}m, 'decided in Redis', file => 'rl.log');

# --- the TLS session is resumed on a reconnection
{
    my $before = stats('tls');
    $redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    my $ok = RLTest::wait_until(sub {
        $t->get('/tls/index.html', { 'X-Key' => 'resume' });
        stats('tls')->{reconnects} > $before->{reconnects} && stats('tls')->{tls_resumed} > $before->{tls_resumed};
    }, 10);
    ok($ok, 'a connection Redis closed is opened again and resumes the session (tls_resumed '
       . stats('tls')->{tls_resumed} . ', reconnects ' . stats('tls')->{reconnects} . ')');
    is($t->statuses('/tls/index.html', 4, { 'X-Key' => 'resumed' }), '200 200 200 429', 'and the limit is exact after it');
}

$t->stop();

# --- Redis Cluster over TLS (tls-cluster yes: MOVED names the TLS ports);
# every node's certificate checked against the host of redis=, an address
{
    my @nodes = RLRedis->cluster(sub { +{ tls => $certs, args => [ '--tls-cluster', 'yes' ] } });
    my $seed = $nodes[0]->tls_port;
    my $c = RLTest->new->start(<<"EOF2");
log_format rl '\$uri \$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone cl 1m redis=127.0.0.1:$seed redis_cluster=on redis_tls=on redis_tls_ca=$certs->{ca} redis_timeout=5s on_redis_error=deny;
server {
    listen 127.0.0.1:%%PORT%%;
    location /one/ { ratelimit zone=cl key=\$http_x_key limit=3 period=1h; alias %%PREFIX%%/html/; }
    location = /stats { ratelimit_stats; }
}
EOF2
    my $exact = 1;
    for my $k (1 .. 30) {
        my @s = map { $c->get('/one/index.html', { 'X-Key' => "key-$k" })->{status} } 1 .. 5;
        $exact &&= "@s" eq '200 200 200 429 429';
    }
    ok($exact, '30 keys: exactly 3 of 5 pass for each');
    my @sizes = map { $_->cmd('DBSIZE') } @nodes;
    is(scalar(grep { $_ > 0 } @sizes), 3, "the keys are spread over the three masters, reached over TLS (@sizes)");
    my $s = $c->zone_stats('cl')->{redis};
    is($s->{tls_failures}, 0, 'no TLS failure');
    is($s->{fallbacks}, 0, 'nothing decided by on_redis_error');
    $c->stop();
    $_->stop for @nodes;
}

# --- the example of docs/redis.md, as written but for its address and files
{
    my %blocks = RLTest::doc_blocks('docs/redis.md', '##');
    my ($example) = @{ $blocks{'TLS and ACL users'} // [] };
    ok($example, 'docs/redis.md has the TLS example') or last;
    $example =~ s{/etc/nginx/redis/}{$certs->{dir}/}g;
    # (a timeout a loaded machine's TLS handshake meets: the default 50 ms
    # decides locally and logs it when the machine stalls)
    $example =~ s{redis=10\.0\.0\.5:6380}{redis=127.0.0.1:$tport redis_timeout=5s};
    $example =~ s{redis_tls_name=redis\.example\.com}{redis_tls_name=redis.test};
    $example =~ s{listen 8080;}{listen 127.0.0.1:%%PORT%%;};
    $example =~ s{(location /api/ \{)}{$1 alias %%PREFIX%%/html/;};
    RLTest::write_file("$certs->{dir}/ca.crt.pem", RLTest::read_file($certs->{ca}));
    RLTest::write_file("$certs->{dir}/redis-password", "lim1ter\n");
    my $before = scalar(@{ $redis->cmd('KEYS', 'ratelimit:*') });
    my $d = RLTest->new->start($example);
    is($d->statuses('/api/index.html', 6, { 'X-Api-Key' => 'doc' }), '200 200 200 200 200 429',
       'the docs\' zone: decided over TLS by the ACL user');
    is(scalar(@{ $redis->cmd('KEYS', 'ratelimit:*') }), $before + 1, 'its key in Redis');
    unlike($d->error_log, qr/ratelimit: redis/, 'no Redis error');
    $d->stop();
}

done_testing();
