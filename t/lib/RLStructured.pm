package RLStructured;

# A small strict parser of HTTP Structured Field Values (RFC 9651), for the
# tests: Lists, Items (with Inner Lists) and Parameters, and the bare items
# Integer, Decimal, String, Token, Byte Sequence, Boolean and Date.  It
# follows the RFC's parsing algorithms and dies, naming the position, on
# anything they fail.  Values come back tagged:
#
#   my $list = RLStructured::parse_list('"a";q=5;w=60');
#   # [ { value => ['string', 'a'], params => [ ['q', ['integer', 5]], ['w', ['integer', 60]] ] } ]
#
# ratelimit_fields($headers) checks a response's rate-limit headers as
# draft-ietf-httpapi-ratelimit-headers-10 defines them and returns them
# plainly (see below).

use strict;
use warnings;

sub fail {
    my ($s, $why) = @_;
    die sprintf("structured field: %s at %d in '%s'\n", $why, $s->{pos}, $s->{text});
}

sub peek { my ($s) = @_; return substr($s->{text}, $s->{pos}, 1) }
sub done { my ($s) = @_; return $s->{pos} >= length $s->{text} }

sub skip_sp {
    my ($s) = @_;
    $s->{pos}++ while !done($s) && peek($s) eq ' ';
}

sub skip_ows {
    my ($s) = @_;
    $s->{pos}++ while !done($s) && (peek($s) eq ' ' || peek($s) eq "\t");
}

# RFC 9651 4.2: a field value is parsed whole; leading and trailing SP only.
sub parse_top {
    my ($text, $what) = @_;
    die "structured field: not ASCII: '$text'\n" if $text =~ /[^\x20-\x7e\t]/;
    my $s = { text => $text, pos => 0 };
    skip_sp($s);
    my $v = $what eq 'list' ? list($s) : item($s);
    skip_sp($s);
    fail($s, 'trailing characters') unless done($s);
    return $v;
}

sub parse_list { return parse_top($_[0], 'list') }
sub parse_item { return parse_top($_[0], 'item') }

sub list {
    my ($s) = @_;
    my @members;
    while (!done($s)) {
        push @members, peek($s) eq '(' ? inner_list($s) : item($s);
        skip_ows($s);
        return \@members if done($s);
        fail($s, "expected ','") unless peek($s) eq ',';
        $s->{pos}++;
        skip_ows($s);
        fail($s, 'trailing comma') if done($s);
    }
    return \@members;
}

sub inner_list {
    my ($s) = @_;
    $s->{pos}++;    # '('
    my @items;
    while (!done($s)) {
        skip_sp($s);
        if (peek($s) eq ')') {
            $s->{pos}++;
            return { inner => \@items, params => params($s) };
        }
        push @items, item($s);
        fail($s, "expected ' ' or ')'") unless !done($s) && (peek($s) eq ' ' || peek($s) eq ')');
    }
    fail($s, 'unterminated inner list');
}

sub item {
    my ($s) = @_;
    my $v = bare($s);
    return { value => $v, params => params($s) };
}

sub params {
    my ($s) = @_;
    my @params;
    while (!done($s) && peek($s) eq ';') {
        $s->{pos}++;
        skip_sp($s);
        my $key = key($s);
        my $value = ['boolean', 1];
        if (!done($s) && peek($s) eq '=') {
            $s->{pos}++;
            $value = bare($s);
        }
        # a repeated key overwrites the earlier value, in its place
        my ($same) = grep { $_->[0] eq $key } @params;
        if ($same) { $same->[1] = $value } else { push @params, [ $key, $value ] }
    }
    return \@params;
}

sub key {
    my ($s) = @_;
    fail($s, 'expected a key') unless substr($s->{text}, $s->{pos}) =~ /\A([a-z*][a-z0-9_\-.*]*)/;
    $s->{pos} += length $1;
    return $1;
}

sub bare {
    my ($s) = @_;
    fail($s, 'expected a bare item') if done($s);
    my $c = peek($s);
    return number($s) if $c eq '-' || $c =~ /[0-9]/;
    return string($s) if $c eq '"';
    return token($s) if $c =~ /[A-Za-z*]/;
    return bytes($s) if $c eq ':';
    return boolean($s) if $c eq '?';
    if ($c eq '@') {
        $s->{pos}++;
        my $n = number($s);
        fail($s, 'a date is an integer') unless $n->[0] eq 'integer';
        return [ 'date', $n->[1] ];
    }
    fail($s, "unexpected '$c'");
}

sub number {
    my ($s) = @_;
    my $rest = substr($s->{text}, $s->{pos});
    fail($s, 'expected a number') unless $rest =~ /\A(-?)([0-9]+)(?:\.([0-9]*))?/;
    my ($sign, $int, $frac) = ($1, $2, $3);
    $s->{pos} += length $&;
    if (!defined $frac) {
        fail($s, 'an integer has at most 15 digits') if length $int > 15;
        return [ 'integer', ($sign ? -1 : 1) * $int ];
    }
    fail($s, 'a decimal has at most 12 integer digits') if length $int > 12;
    fail($s, 'a decimal has 1 to 3 fraction digits') if length $frac < 1 || length $frac > 3;
    return [ 'decimal', ($sign ? -1 : 1) * "$int.$frac" ];
}

sub string {
    my ($s) = @_;
    $s->{pos}++;
    my $out = '';
    while (!done($s)) {
        my $c = peek($s);
        $s->{pos}++;
        if ($c eq '\\') {
            fail($s, 'unterminated escape') if done($s);
            my $e = peek($s);
            fail($s, "bad escape '\\$e'") unless $e eq '"' || $e eq '\\';
            $s->{pos}++;
            $out .= $e;
        } elsif ($c eq '"') {
            return [ 'string', $out ];
        } elsif ($c =~ /[\x20-\x7e]/) {
            $out .= $c;
        } else {
            fail($s, 'a string holds printable ASCII only');
        }
    }
    fail($s, 'unterminated string');
}

sub token {
    my ($s) = @_;
    substr($s->{text}, $s->{pos}) =~ /\A([A-Za-z*][!#\$%&'*+\-.^_`|~0-9A-Za-z:\/]*)/;
    $s->{pos} += length $1;
    return [ 'token', $1 ];
}

sub bytes {
    my ($s) = @_;
    fail($s, 'bad byte sequence') unless substr($s->{text}, $s->{pos}) =~ /\A:([A-Za-z0-9+\/=]*):/;
    $s->{pos} += length($1) + 2;
    return [ 'bytes', $1 ];
}

sub boolean {
    my ($s) = @_;
    fail($s, 'a boolean is ?0 or ?1') unless substr($s->{text}, $s->{pos}) =~ /\A\?([01])/;
    $s->{pos} += 2;
    return [ 'boolean', $1 ];
}

# The named parameters of an item, each checked to be an Integer >= its
# minimum.
sub integers {
    my ($item, $field, %min) = @_;
    my %p;
    for my $param (@{ $item->{params} }) {
        my ($k, $v) = @$param;
        $p{$k} = $v;
    }
    my %out;
    for my $k (sort keys %min) {
        my $v = $p{$k} // die "$field: no \"$k\" parameter\n";
        die "$field: \"$k\" is a $v->[0], not an Integer\n" unless $v->[0] eq 'integer';
        die "$field: \"$k\" is $v->[1], below $min{$k}\n" if $v->[1] < $min{$k};
        $out{$k} = $v->[1];
    }
    return \%out;
}

# The rate-limit headers of an HTTP::Tiny response, checked: RateLimit-Policy
# a List of Items, each a String (no name twice) with q (Integer >= 0) and,
# for a policy with a window, w (Integer >= 1); RateLimit a List of one
# Item, the String of one of those policies, with r (Integer >= 0) and, for
# a policy with a window, t (Integer >= 0); Retry-After delay-seconds.
# Returns { policies => [{name, q, w?}, ...], policy => the one RateLimit
# names (or the only one), limit => {name, r, t?}, retry_after => seconds },
# the parts present; dies otherwise.
sub ratelimit_fields {
    my ($headers) = @_;
    my %out;
    my $string = sub {
        my ($item, $field) = @_;
        die "$field: an Inner List\n" if $item->{inner};
        die "$field: the policy's name is a $item->{value}[0], not a String\n" unless $item->{value}[0] eq 'string';
        return $item->{value}[1];
    };
    my $optional = sub {
        my ($item, $field, $k, $min) = @_;
        return () unless grep { $_->[0] eq $k } @{ $item->{params} };
        return %{ integers($item, $field, $k => $min) };
    };
    if (defined(my $value = $headers->{'ratelimit-policy'})) {
        die "ratelimit-policy: sent more than once\n" if ref $value;
        my $list = parse_list($value);
        die "ratelimit-policy: no policy\n" unless @$list;
        my %seen;
        for my $item (@$list) {
            my $name = $string->($item, 'ratelimit-policy');
            die "ratelimit-policy: \"$name\" listed twice\n" if $seen{$name}++;
            push @{ $out{policies} }, { name => $name, %{ integers($item, 'ratelimit-policy', q => 0) },
                                        $optional->($item, 'ratelimit-policy', w => 1) };
        }
        $out{policy} = $out{policies}[0] if @{ $out{policies} } == 1;
    }
    if (defined(my $value = $headers->{'ratelimit'})) {
        die "ratelimit: sent more than once\n" if ref $value;
        my $list = parse_list($value);
        die "ratelimit: one policy expected, got " . scalar(@$list) . "\n" unless @$list == 1;
        my $name = $string->($list->[0], 'ratelimit');
        $out{limit} = { name => $name, %{ integers($list->[0], 'ratelimit', r => 0) },
                        $optional->($list->[0], 'ratelimit', t => 0) };
        if ($out{policies}) {
            ($out{policy}) = grep { $_->{name} eq $name } @{ $out{policies} };
            die "ratelimit: \"$name\" is no policy of RateLimit-Policy\n" unless $out{policy};
        }
    }
    if (defined(my $ra = $headers->{'retry-after'})) {
        die "retry-after: sent more than once\n" if ref $ra;
        die "retry-after: '$ra' is not delay-seconds\n" unless $ra =~ /\A[0-9]+\z/;
        $out{retry_after} = $ra + 0;
    }
    return \%out;
}

1;
