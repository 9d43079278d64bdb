#!/usr/bin/perl
# A request its client abandons (it ends with 499) keeps what it reserved,
# whatever its charge= value says: under the login recipe (only 401 and 403
# count), a guesser who closes each attempt before the backend's answer
# (after 0.3 s of 1 s) would otherwise be charged 0 for every guess.  Five
# abandoned attempts spend the five failures the rule allows; the sixth is
# refused.  abandoned=charge spends what the charge says instead (0 here).
# HTTP/1.1 (the connection closed) and HTTP/2 (the stream reset, the
# connection kept), local and Redis zones.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(sleep);
use RLTest;
use RLRedis;
use RLH2;
use RLSlowUpstream;

my $up = RLSlowUpstream->new->start;
my $upport = $up->port;
my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $h2 = RLH2::missing() ? undef : RLTest::free_port();
my $h2listen = $h2 ? RLH2::listen_line("127.0.0.1:$h2") : '';

my $t = RLTest->new();
# the login rule, locally and in Redis, keeping an abandoned attempt's unit
# or charging what $login_failed says of it
my $locations = "    proxy_set_header X-Answer-Status 401;\n";
for my $where (['', 'login'], ['r', 'rlogin']) {
    for my $kind (['login', ''], ['free', ' abandoned=charge']) {
        my ($r, $zone) = @$where;
        my ($path, $abandoned) = @$kind;
        my $name = $abandoned ? 'free' : 'kept';
        $locations .= <<"LOC";
    location /$r$path {
        ratelimit zone=$zone key=\$http_x_client algorithm=sliding_log limit=5 period=15m cost=1
                  charge=\$login_failed$abandoned name=$name;
        proxy_pass http://127.0.0.1:$upport/hold/1000;
    }
LOC
    }
}
$t->start(<<"EOF", workers => 2);
ratelimit_zone login 1m;
ratelimit_zone rlogin 1m redis=127.0.0.1:$rport redis_timeout=5s;
map \$status \$login_failed { 401 1; 403 1; default 0; }
log_format ended '\$uri \$status \$ratelimit_status';

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/ended.log ended;
$locations
}
@{[ $h2 ? "server {\n    $h2listen\n    access_log %%PREFIX%%/ended.log ended;\n$locations\n}" : '' ]}
server {
    listen 127.0.0.1:@{[ my $api = RLTest::free_port() ]};
    location /rl/ { ratelimit_api; }
}
EOF

my $lines = 0;
sub ended {
    my ($n) = @_;
    $lines += $n;
    RLTest::wait_until(sub { (() = $t->file('ended.log') =~ /\n/g) >= $lines }, 20);
}

# HTTP/1.1: the request sent, the connection closed after 0.3 s
sub close_after {
    my ($path, $client) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port, Proto => 'tcp') or die;
    print $s "GET $path HTTP/1.1\r\nHost: x\r\nX-Client: $client\r\n\r\n";
    sleep 0.3;
    close $s;
}

# HTTP/2: the stream reset after 0.3 s, its connection kept meanwhile
sub reset_after {
    my ($path, $client) = @_;
    RLH2::reset_after($h2, $path, { 'x-client' => $client }, 0.3);
}

my @ways = (['HTTP/1.1', \&close_after]);
push @ways, ['HTTP/2', \&reset_after] if $h2;

for my $way (@ways) {
    my ($proto, $abandon) = @$way;
    for my $zone (['', 'local'], ['r', 'Redis']) {
        my ($r, $where) = @$zone;
        my $client = "$proto-$where-guesser";
        $abandon->("/${r}login", $client) for 1 .. 5;
        ended(5);
        my @last = (split /\n/, $t->file('ended.log'))[-5 .. -1];
        is(scalar(grep { m{^/${r}login 499 PASSED$} } @last), 5, "$proto, $where: five abandoned attempts, logged 499");
        my $x = $t->get("/${r}login", { 'X-Client' => $client });
        is($x->{status}, 429, "$proto, $where: the sixth attempt is refused: the abandoned ones kept their unit");
        ended(1);

        # abandoned=charge: charged what $login_failed says of a 499 (0)
        my $free = "$proto-$where-free";
        $abandon->("/${r}free", $free) for 1 .. 6;
        ended(6);
        $x = $t->get("/${r}free", { 'X-Client' => $free });
        is($x->{status}, 401, "$proto, $where: abandoned=charge: six abandoned attempts were free, the next is served");
        ended(1);
    }
}
note('HTTP/2 not tested: ' . RLH2::missing()) unless $h2;

$t->stop;
done_testing();
