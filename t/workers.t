#!/usr/bin/perl
# Two worker processes share limits exactly: concurrent clients spread over
# both workers; exactly `limit` admitted, and stacked rules in two zones
# consume atomically (all: nothing for denied requests; any: only the
# allowing rules).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new->start(<<'EOF', workers => 2);
ratelimit_zone z 1m;
ratelimit_zone other 1m;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    add_header X-Worker $pid always;
    location /one/ {
        ratelimit zone=z key=shared limit=50 period=1h;
        alias %%PREFIX%%/html/;
    }
    location /all/ {
        ratelimit zone=z key=all limit=30 period=1h name=a;
        ratelimit zone=other key=all limit=50 period=1h name=b;
        alias %%PREFIX%%/html/;
    }
    location /all-b/ {
        ratelimit zone=other key=all limit=50 period=1h name=b;
        alias %%PREFIX%%/html/;
    }
    location /any/ {
        ratelimit zone=z key=any limit=30 period=1h name=a;
        ratelimit zone=other key=any limit=50 period=1h name=b;
        ratelimit_combine any;
        alias %%PREFIX%%/html/;
    }
    location /any-a/ {
        ratelimit zone=z key=any limit=30 period=1h name=a;
        alias %%PREFIX%%/html/;
    }
}
EOF

# $clients processes, $each requests each, new connections: status counts
# and the workers that answered.
sub hammer {
    my ($path, $clients, $each) = @_;
    my @answers = RLTest::parallel(map {
        sub { [ map { my $r = $t->get($path); [ $r->{status}, $r->{headers}{'x-worker'} // '-' ] } 1 .. $each ] }
    } 1 .. $clients);
    my (%status, %worker);
    for (map { @$_ } @answers) {
        $status{ $_->[0] }++;
        $worker{ $_->[1] }++;
    }
    return (\%status, \%worker);
}

my ($status, $worker) = hammer('/one/index.html', 8, 40);
is($status->{200}, 50, 'one rule: exactly the limit admitted across both workers');
is($status->{429}, 320 - 50, 'one rule: every other request rejected');
is(scalar(keys %$worker), 2, 'both workers served requests');

($status) = hammer('/all/index.html', 8, 25);
is($status->{200}, 30, 'all: admitted as the tighter rule allows');
is($t->get('/all-b/index.html')->{headers}{'x-ratelimit-remaining'}, 50 - 30 - 1,
   'all: the other rule spent exactly the admitted requests');

($status) = hammer('/any/index.html', 8, 25);
is($status->{200}, 50, 'any: admitted while either rule allows');
my $r = $t->get('/any-a/index.html');
is($r->{status}, 429, 'any: the tighter rule spent exactly its 30');
is($r->{headers}{'x-ratelimit-remaining'}, 0, 'any: and no more');

$t->stop();
done_testing();
